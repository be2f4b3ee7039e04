//! The double on the wire, read with a plain TCP client: what a kube-apiserver 1.28 answer
//! looks like (status, headers, chunked watch bodies, one JSON event per line), and what
//! a dropped connection looks like (a chunked body that never terminates).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};
use torii_kube_double::{FakeApiServer, Objects, Resource};

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The next chunk of a chunked body; `Ok(None)` at the terminating chunk, `Err` when
    /// the connection ends first.
    fn chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut size = String::new();
        if self.reader.read_line(&mut size)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let n = usize::from_str_radix(size.trim(), 16).map_err(|_| std::io::ErrorKind::InvalidData)?;
        let mut data = vec![0; n + 2];
        self.reader.read_exact(&mut data)?;
        data.truncate(n);
        Ok((n > 0).then_some(data))
    }

    fn body(mut self) -> Value {
        let mut body = Vec::new();
        if let Some(len) = self.header("content-length") {
            body.resize(len.parse().unwrap(), 0);
            self.reader.read_exact(&mut body).unwrap();
        } else {
            while let Some(c) = self.chunk().unwrap() {
                body.extend(c);
            }
        }
        serde_json::from_slice(&body).unwrap()
    }
}

fn get(api: &FakeApiServer, path: &str) -> Response {
    let mut s = TcpStream::connect(api.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n\r\n", api.addr()).unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        let (n, v) = line.trim().split_once(':').unwrap();
        headers.push((n.trim().to_owned(), v.trim().to_owned()));
    }
    Response { status, headers, reader }
}

/// `method path` with a JSON body; the response's status and body.
fn send(api: &FakeApiServer, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut s = TcpStream::connect(api.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = body.to_string();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        api.addr(),
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        let (n, v) = line.trim().split_once(':').unwrap();
        headers.push((n.trim().to_owned(), v.trim().to_owned()));
    }
    (status, Response { status, headers, reader }.body())
}

/// Leases as client-go's leader election uses them: create (201; 409 AlreadyExists when
/// taken), replace carrying the resourceVersion read (200; 409 Conflict when someone wrote
/// in between), GET, 404 for a replace of a missing Lease; other kinds stay read-only.
#[test]
fn leases_are_created_and_replaced_with_optimistic_concurrency() {
    let api = FakeApiServer::start(&Objects::new()).unwrap();
    let path = "/apis/coordination.k8s.io/v1/namespaces/torii/leases";
    let lease = |holder: &str, rv: Option<&str>| {
        let mut l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "torii-l2-203.0.113.10"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}});
        if let Some(rv) = rv {
            l["metadata"]["resourceVersion"] = rv.into();
        }
        l
    };
    let (code, created) = send(&api, "POST", path, &lease("gw-a", None));
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["namespace"], "torii");
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let (code, taken) = send(&api, "POST", path, &lease("gw-b", None));
    assert_eq!((code, taken["reason"].as_str()), (409, Some("AlreadyExists")), "{taken}");
    assert_eq!(taken["message"], "leases.coordination.k8s.io \"torii-l2-203.0.113.10\" already exists");

    let one = format!("{path}/torii-l2-203.0.113.10");
    let (code, renewed) = send(&api, "PUT", &one, &lease("gw-a", Some(&rv)));
    assert_eq!(code, 200, "{renewed}");
    let newer = renewed["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    assert_ne!(newer, rv);
    let (code, stale) = send(&api, "PUT", &one, &lease("gw-b", Some(&rv)));
    assert_eq!((code, stale["reason"].as_str()), (409, Some("Conflict")), "{stale}");
    assert!(stale["message"].as_str().unwrap().contains("the object has been modified"), "{stale}");
    let got = get(&api, &one).body();
    assert_eq!(got["spec"]["holderIdentity"], "gw-a", "a refused write changes nothing");
    assert_eq!(got["metadata"]["resourceVersion"].as_str(), Some(newer.as_str()));

    let (code, missing) = send(&api, "PUT", &format!("{path}/other"), &json!({"metadata": {"name": "other"}}));
    assert_eq!((code, missing["reason"].as_str()), (404, Some("NotFound")), "{missing}");
    let (code, _) = send(&api, "POST", "/api/v1/namespaces/torii/services", &json!({"metadata": {"name": "x"}}));
    assert_eq!(code, 405, "Services stay read-only");
}

fn event(chunk: &[u8]) -> (String, String) {
    assert!(chunk.ends_with(b"\n"), "one event per line: {:?}", String::from_utf8_lossy(chunk));
    let v: Value = serde_json::from_slice(chunk).unwrap();
    let name = v.pointer("/object/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
    (v["type"].as_str().unwrap().to_owned(), name)
}

#[test]
fn discovery_lists_and_errors_look_like_kube_apiserver() {
    let api = FakeApiServer::start(&Objects::recorded()).unwrap();
    let version = get(&api, "/version");
    assert_eq!(version.status, 200);
    assert_eq!(version.body()["gitVersion"], "v1.28.4");

    let list = get(&api, "/api/v1/services?limit=2");
    assert_eq!(list.status, 200);
    assert_eq!(list.header("content-type"), Some("application/json"));
    assert!(list.header("audit-id").is_some());
    let list = list.body();
    assert_eq!(list["kind"], "ServiceList");
    assert_eq!(list["metadata"]["resourceVersion"], "529");
    assert_eq!(list["metadata"]["remainingItemCount"], 15);
    assert_eq!(list["items"][0]["metadata"]["name"], "kubernetes", "sorted by namespace/name");

    let nodes = get(&api, "/api/v1/nodes?fieldSelector=metadata.name%3Dgw-1").body();
    assert_eq!(nodes["items"].as_array().unwrap().len(), 1);
    let bad = get(&api, "/api/v1/services?fieldSelector=spec.type%3DNodePort");
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.body()["message"],
        "\"spec.type\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    let missing = get(&api, "/api/v1/namespaces/demo/services/does-not-exist");
    assert_eq!(missing.status, 404);
    let recorded: Value = serde_json::from_str(include_str!("../fixtures/error-404-service-not-found.json")).unwrap();
    assert_eq!(missing.body(), recorded);
    // Errors with the recorded bodies.
    for (path, code, file) in [
        ("/apis/discovery.k8s.io/v1/nosuchresources", 404, include_str!("../fixtures/error-404-unknown-resource.json")),
        (
            "/api/v1/services?labelSelector=app%20in%20(web",
            400,
            include_str!("../fixtures/error-400-bad-label-selector.json"),
        ),
        (
            "/api/v1/services?resourceVersion=1&resourceVersionMatch=Exact",
            410,
            include_str!("../fixtures/error-410-list-services-rv1-exact.json"),
        ),
        (
            "/api/v1/services?watch=true&resourceVersion=abc",
            500,
            include_str!("../fixtures/error-500-watch-bad-resourceversion.json"),
        ),
    ] {
        let r = get(&api, path);
        assert_eq!(r.status, code, "{path}");
        assert_eq!(r.body(), serde_json::from_str::<Value>(file).unwrap(), "{path}");
    }
    // An injected 403 has the recorded shape (another ServiceAccount's name in the message).
    api.set_failure(Resource::Services, Some(403));
    let forbidden = get(&api, "/api/v1/services?limit=500");
    assert_eq!(forbidden.status, 403);
    let forbidden = forbidden.body();
    let recorded: Value = serde_json::from_str(include_str!("../fixtures/error-403-sa-list-services.json")).unwrap();
    for key in ["kind", "status", "reason", "code", "details"] {
        assert_eq!(forbidden[key], recorded[key], "{key}");
    }
    api.set_failure(Resource::Services, None);
    let streaming = get(&api, "/api/v1/services?watch=true&sendInitialEvents=true&resourceVersion=0");
    assert_eq!(streaming.status, 422, "no WatchList in 1.28");
}

#[test]
fn watch_is_a_chunked_stream_of_events() {
    let api = FakeApiServer::start(&Objects::recorded()).unwrap();
    let mut w =
        get(&api, "/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion=529&allowWatchBookmarks=true");
    assert_eq!(w.status, 200);
    assert_eq!(w.header("transfer-encoding"), Some("chunked"));
    assert_eq!(w.header("content-type"), Some("application/json"));
    assert!(api.wait_for_watches(Some(Resource::EndpointSlices), 1, Duration::from_secs(5)));

    // The recorded churn sequence, event by event.
    let recorded = torii_kube_double::recorded_events(Resource::EndpointSlices);
    for (kind, object) in &recorded {
        if kind == "DELETED" {
            api.delete(Resource::EndpointSlices, "demo", object["metadata"]["name"].as_str().unwrap()).unwrap();
        } else {
            api.apply(object.clone()).unwrap();
        }
        let (got_kind, name) = event(&w.chunk().unwrap().unwrap());
        assert_eq!((got_kind.as_str(), name.as_str()), (kind.as_str(), "churn-6wqlh"));
    }
    // A change the watch's resource type does not see moves no bookmark.
    api.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "demo"}})).unwrap();
    assert_eq!(api.bookmark(Some(Resource::EndpointSlices)), 0);

    // A second watch from the list's RV replays the whole sequence at once.
    let mut replay = get(&api, "/apis/discovery.k8s.io/v1/endpointslices?watch=1&resourceVersion=529");
    for (kind, _) in &recorded {
        assert_eq!(&event(&replay.chunk().unwrap().unwrap()).0, kind);
    }

    // Cut: the body never terminates.
    assert_eq!(api.drop_watches(None), 2);
    assert!(w.chunk().is_err(), "a dropped watch has no terminating chunk");
    // Cleanly ended: it does.
    let mut w = get(&api, "/api/v1/services?watch=true&resourceVersion=0&timeoutSeconds=1");
    let mut added = 0;
    while let Some(c) = w.chunk().unwrap() {
        assert_eq!(event(&c).0, "ADDED");
        added += 1;
    }
    assert_eq!(added, 18, "synthetic ADDED for the current state, then the end at timeoutSeconds");

    // Expired: one ERROR event (Status 410), then the end of the stream.
    let mut gone = get(&api, "/api/v1/services?watch=true&resourceVersion=1");
    let c = gone.chunk().unwrap().unwrap();
    let v: Value = serde_json::from_slice(&c).unwrap();
    assert_eq!((v["type"].as_str(), v["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));
    assert!(gone.chunk().unwrap().is_none());
}
