//! The Linux kernel baseline: the data path kube-proxy programs, on a veth pair.
//!
//! ```text
//!  torii-bench net_af_packet ── veth ── (netns) kernel forwarding: nftables DNAT + masquerade
//!  (CPU `bench_cpu`)      <gen>    <dut>   softirq on CPU `dut_cpu` (RPS)
//! ```
//!
//! The device side lives in a network namespace of its own with the gateway's MAC
//! ([`plan::GATEWAY_MAC`]) and addresses (198.18.0.1/15, 10.70.0.1/16), IPv4 forwarding
//! on, ICMP redirects off (one-armed: frames leave by the interface they came in on), and
//! kube-proxy's nftables rules for the plan's Services ([`ruleset`]). Both ends have their
//! offloads off, so the packet socket sees every checksum complete. RPS moves the
//! device side's receive processing (and so the forwarding) to `dut_cpu`, off the
//! generator's CPU, where veth would otherwise run it (in the sender's context).
//!
//! kube-proxy's rule shapes (`pkg/proxy/nftables/proxier.go`, Kubernetes 1.31): a
//! `service-ips` verdict map keyed by `daddr . l4proto . dport`; per external IP an
//! `external-*` chain that marks for masquerade and jumps to the `service-*` chain, which
//! picks an endpoint with `numgen random mod N vmap`; per endpoint an `endpoint-*` chain
//! that DNATs; `masquerading` in postrouting (`masquerade fully-random` for marked
//! packets); `ct state invalid drop` in the forward hook. conntrack is liberal about TCP
//! windows (`nf_conntrack_tcp_be_liberal = 1`, kube-proxy's `--conntrack-tcp-be-liberal`)
//! as torii is in the benchmark, and `nf_conntrack_max` is raised to four times the flows.
//!
//! Everything is removed when the [`KernelPath`] is dropped (the namespace, and with it
//! the veth pair).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::plan::{self, Plan, Protocol};

/// The kernel path, set up.
pub struct KernelPath {
    netns: String,
    /// The generator's end of the veth pair (in torii-bench's namespace).
    pub gen_if: String,
    /// The device's end (in the namespace).
    pub dut_if: String,
}

fn run(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0]).args(&args[1..]).output().with_context(|| format!("run {}", args[0]))?;
    if !out.status.success() {
        bail!("{} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl KernelPath {
    /// Creates the namespace and veth pair (names from `tag`, e.g. the pid), the device
    /// side's addresses and sysctls, RPS to `dut_cpu`, and loads the nftables rules of
    /// `plans` (the largest plan's Services) from `workdir/kernel.nft`.
    ///
    /// # Errors
    /// When a command fails (not root, no `nft`, ...); what was created is removed.
    pub fn setup(tag: u32, plan: &Plan, dut_cpu: usize, workdir: &Path) -> Result<Self> {
        let path = Self::pipe('k', tag, dut_cpu)?;
        path.configure(plan, workdir)?;
        Ok(path)
    }

    /// Only the namespace and the veth pair (`kind` names them: `tb<kind><tag>g/d`), the
    /// device side with the gateway's MAC, no address (for torii's AF_PACKET driver, which
    /// taps the interface: the kernel must not answer for it), offloads off, RPS to
    /// `dut_cpu`.
    ///
    /// # Errors
    /// When a command fails; what was created is removed.
    pub fn pipe(kind: char, tag: u32, dut_cpu: usize) -> Result<Self> {
        let netns = format!("torii-bench-{kind}{tag}");
        let (gen_if, dut_if) = (format!("tb{kind}{}g", tag % 100_000), format!("tb{kind}{}d", tag % 100_000));
        let _ = run(&["ip", "netns", "del", &netns]);
        run(&["ip", "netns", "add", &netns])?;
        let path = Self { netns, gen_if, dut_if };
        path.link(dut_cpu)?;
        Ok(path)
    }

    /// The command line running `program` in the namespace, pinned to `cpu`.
    pub fn command(&self, program: &Path, cpu: usize) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, "taskset", "-c", &cpu.to_string()]).arg(program);
        c
    }

    fn exec(&self, args: &[&str]) -> Result<String> {
        let mut a = vec!["ip", "netns", "exec", &self.netns];
        a.extend_from_slice(args);
        run(&a)
    }

    fn link(&self, dut_cpu: usize) -> Result<()> {
        let (g, d) = (self.gen_if.as_str(), self.dut_if.as_str());
        run(&["ip", "link", "add", g, "type", "veth", "peer", "name", d, "netns", &self.netns])?;
        let _ = run(&["sysctl", "-qw", &format!("net.ipv6.conf.{g}.disable_ipv6=1")]);
        run(&["ip", "link", "set", g, "up"])?;
        self.exec(&["sysctl", "-qw", &format!("net.ipv6.conf.{d}.disable_ipv6=1")])?;
        self.exec(&["ip", "link", "set", d, "address", &plan::GATEWAY_MAC.to_string()])?;
        self.exec(&["ip", "link", "set", d, "up"])?;
        self.exec(&["ip", "link", "set", "lo", "up"])?;
        for (dev, ns) in [(g, false), (d, true)] {
            let args = ["ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
            if ns {
                self.exec(&args)?;
            } else {
                run(&args)?;
            }
        }
        let mask = format!("{:x}", 1u64 << dut_cpu);
        self.exec(&["sh", "-c", &format!("echo {mask} > /sys/class/net/{d}/queues/rx-0/rps_cpus")])?;
        Ok(())
    }

    fn configure(&self, plan: &Plan, workdir: &Path) -> Result<()> {
        let d = self.dut_if.as_str();
        self.exec(&["ip", "addr", "add", plan::GATEWAY_CLIENT_PREFIX, "dev", d])?;
        self.exec(&["ip", "addr", "add", &format!("{}/16", plan::SNAT_IP), "dev", d])?;
        for s in [
            "net.ipv4.ip_forward=1".to_string(),
            "net.ipv4.conf.all.send_redirects=0".into(),
            format!("net.ipv4.conf.{d}.send_redirects=0"),
            "net.ipv4.conf.all.rp_filter=0".into(),
            format!("net.ipv4.conf.{d}.rp_filter=0"),
            "net.netfilter.nf_conntrack_tcp_be_liberal=1".into(),
        ] {
            self.exec(&["sysctl", "-qw", &s])?;
        }
        // Global (the initial namespace's): raised, never lowered.
        let want = (u64::from(plan.flows) * 4).max(262_144);
        let have: u64 = std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if have < want {
            run(&["sysctl", "-qw", &format!("net.netfilter.nf_conntrack_max={want}")])?;
        }
        let rules = workdir.join("kernel.nft");
        std::fs::write(&rules, ruleset(plan))?;
        self.exec(&["nft", "-f", &rules.display().to_string()])?;
        Ok(())
    }

    /// The `net_af_packet` vdev on the generator's end.
    pub fn vdev(&self, index: usize) -> String {
        format!(
            "net_af_packet{index},iface={},qpairs=1,blocksz=4096,framesz=2048,framecnt=4096,qdisc_bypass=1",
            self.gen_if
        )
    }
}

impl Drop for KernelPath {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.netns]);
        let _ = run(&["ip", "link", "del", &self.gen_if]);
    }
}

/// kube-proxy's nftables rules (see the module docs) for `plan`'s Services, each with its
/// VIP as an external IP, UDP 7 → 7007 and TCP 80 → 8080, and its endpoints.
pub fn ruleset(plan: &Plan) -> String {
    let mut s = String::from(
        "# Written by torii-bench: the shapes kube-proxy's nftables mode programs.\n\
         table ip kube-proxy\ndelete table ip kube-proxy\n\
         table ip kube-proxy {\n\
         \tchain mark-for-masquerade {\n\t\tmeta mark set meta mark or 0x4000\n\t}\n\
         \tchain masquerading {\n\t\tmeta mark & 0x4000 == 0 return\n\
         \t\tmeta mark set meta mark xor 0x4000\n\t\tmasquerade fully-random\n\t}\n\
         \tchain filter-forward {\n\t\ttype filter hook forward priority -110; policy accept;\n\
         \t\tct state invalid drop\n\t}\n\
         \tchain nat-prerouting {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t\tjump services\n\t}\n\
         \tchain nat-postrouting {\n\t\ttype nat hook postrouting priority 100; policy accept;\n\
         \t\tjump masquerading\n\t}\n",
    );
    let mut elements = Vec::new();
    for svc in 0..plan.services {
        let vip = Plan::vip(svc);
        for (proto, port, target) in [
            (Protocol::Udp, plan::VIP_PORT, plan::ENDPOINT_PORT),
            (Protocol::Tcp, plan::VIP_TCP_PORT, plan::ENDPOINT_TCP_PORT),
        ] {
            let p = proto.name();
            let id = format!("bench/bench-{svc}/{p}/p{port}");
            let _ = write!(
                s,
                "\tchain external-{id} {{\n\t\tjump mark-for-masquerade\n\t\tgoto service-{id}\n\t}}\n\
                 \tchain service-{id} {{\n\t\tnumgen random mod {} vmap {{ ",
                plan.endpoints
            );
            let chains: Vec<String> = (0..plan.endpoints)
                .map(|j| format!("{j} : goto endpoint-{id}__{}/{target}", plan.endpoint(svc, j)))
                .collect();
            let _ = writeln!(s, "{} }}\n\t}}", chains.join(", "));
            for j in 0..plan.endpoints {
                let ep = plan.endpoint(svc, j);
                let _ = writeln!(
                    s,
                    "\tchain endpoint-{id}__{ep}/{target} {{\n\t\tip saddr {ep} jump mark-for-masquerade\n\
                     \t\tmeta l4proto {p} dnat to {ep}:{target}\n\t}}"
                );
            }
            elements.push(format!("{vip} . {p} . {port} : goto external-{id}"));
        }
    }
    let _ = write!(
        s,
        "\tmap service-ips {{\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\telements = {{ {} }}\n\t}}\n\
         \tchain services {{\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}}\n}}\n",
        elements.join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_has_kube_proxys_chains_for_every_service_and_endpoint() {
        let p = Plan::new(Protocol::Udp, 1000, 2, 3, Some(64), false).unwrap();
        let r = ruleset(&p);
        assert_eq!(r.matches("\tchain service-").count(), 4, "2 Services × UDP and TCP");
        assert_eq!(r.matches("\tchain endpoint-").count(), 12);
        assert!(r.contains("203.0.113.11 . tcp . 80 : goto external-bench/bench-1/tcp/p80"), "{r}");
        assert!(r.contains("numgen random mod 3 vmap { 0 : goto endpoint-bench/bench-0/udp/p7__10.70.1.2/7007"), "{r}");
        assert!(r.contains("meta l4proto tcp dnat to 10.70.1.7:8080"), "{r}");
        assert!(r.contains("masquerade fully-random"));
    }
}
