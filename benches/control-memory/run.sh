#!/bin/bash
# run.sh BIN_DIR [WORK_DIR]: in WORK_DIR (default /tmp/mem) holding m/cluster.yaml (gen.py) and gw.toml
# (configs/gateway.toml with shm_dir = "/dev/shm/torii-memctl"): torii-fake-apiserver serving m/,
# torii-control run following it; its memory 5 s after the first publication.
B=$(realpath "$1"); cd "${2:-/tmp/mem}"; rm -rf /dev/shm/torii-memctl kc.yaml
$B/torii-fake-apiserver --manifests m --kubeconfig-out kc.yaml > api.log 2>&1 & APID=$!
for i in $(seq 100); do [ -f kc.yaml ] && break; sleep 0.2; done
$B/torii-control run --config gw.toml --kubeconfig kc.yaml --node-name gw > ctl.log 2>&1 & CPID=$!
for i in $(seq 300); do grep -q "published table" ctl.log && break; sleep 0.1; done
sleep 5; grep -E "VmRSS|VmHWM" /proc/$CPID/status | tr '\n' ' '; echo
kill $CPID; sleep 1; kill $APID; wait
