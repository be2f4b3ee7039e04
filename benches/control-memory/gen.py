# gen.py N [E]: N ClusterIP Services with one externalIP each, one EndpointSlice of E ready endpoints
# each (default 10), and the Node "gw", as one YAML file of 2 N + 1 documents on stdout.
import sys
n = int(sys.argv[1]); e = int(sys.argv[2]) if len(sys.argv) > 2 else 10; out = []
out.append("""apiVersion: v1
kind: Node
metadata: {name: gw, resourceVersion: "1"}
status:
  addresses: [{type: InternalIP, address: 10.0.0.2}]
""")
for i in range(n):
    ext = f"198.{18 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
    out.append(f"""apiVersion: v1
kind: Service
metadata: {{name: svc-{i:05}, namespace: bench, resourceVersion: "1"}}
spec:
  type: ClusterIP
  clusterIP: 10.96.{(i >> 8) & 255}.{i & 255}
  externalIPs: [{ext}]
  selector: {{app: svc-{i:05}}}
  ports: [{{name: http, port: 80, protocol: TCP, targetPort: 8080}}]
""")
    b = 0x0a010000 + i * 10
    eps = ", ".join(f"{{addresses: [10.{(x >> 16) & 255}.{(x >> 8) & 255}.{x & 255}], conditions: {{ready: true}}}}" for x in range(b, b + e))
    out.append(f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: svc-{i:05}-x7k2p
  namespace: bench
  resourceVersion: "1"
  labels: {{kubernetes.io/service-name: svc-{i:05}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{eps}]
""")
print("---\n".join(out))
