//! The HTTP side of the double: HTTP/1.1 on a TCP listener (hyper), routing of the
//! Kubernetes API paths the gateway's control plane uses, chunked streaming watch
//! responses, and the admin API under [`ADMIN_PREFIX`] that drives the double from
//! another process.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame as BodyFrame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::time::Instant;

use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{status, ApiError, Frame, ListRequest, Selection, Store, WatchRequest};
use crate::Resource;

/// Path prefix of the admin API (not part of Kubernetes; a client never asks for it).
pub const ADMIN_PREFIX: &str = "/torii-double/v1/";

/// The response body: a whole buffer, or a stream of watch events.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// What the server tasks share with the [`crate::FakeApiServer`] handle.
#[derive(Debug)]
pub struct Shared {
    /// The state.
    pub store: Mutex<Store>,
    /// How often an idle watch gets a bookmark (when there is a newer RV).
    pub bookmark_interval: Duration,
}

impl Shared {
    /// Locks the store (a panic in another thread does not poison the double).
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Accepts connections until `shutdown` fires.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: tokio::sync::oneshot::Receiver<()>) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(&shared, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
    // Cut every open watch so that the connections' tasks end with the runtime.
    shared.lock().drop_watches(None);
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never: Infallible| match never {}).boxed_unsync()
}

fn audit_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("00000000-0000-4000-9000-{:012x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn response(code: u16, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert("audit-id", audit_id().parse().expect("valid header"));
    h.insert("cache-control", "no-cache, private".parse().expect("valid header"));
    h.insert("content-type", "application/json".parse().expect("valid header"));
    r
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    response(code, full(serde_json::to_vec(value).expect("JSON values serialise")))
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.body)
}

fn method_not_allowed() -> Response<Body> {
    json_response(
        405,
        &status(405, Some("MethodNotAllowed"), "the server does not allow this method on the requested resource", None),
    )
}

fn not_found() -> Response<Body> {
    json_response(
        404,
        &status(404, Some("NotFound"), "the server could not find the requested resource", Some(json!({}))),
    )
}

/// Percent-decodes a query component (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn is_true(v: Option<&String>) -> bool {
    v.is_some_and(|v| v == "true" || v == "1")
}

/// Where an API path points.
enum Target {
    Collection { resource: Resource, namespace: Option<String> },
    Object { resource: Resource, namespace: Option<String>, name: String },
}

fn route(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, "v1", rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return None,
    };
    let resource = Resource::ALL.into_iter().find(|r| r.group() == group && r.plural() == plural)?;
    if namespace.is_some() && !resource.namespaced() {
        return None;
    }
    let namespace = namespace.map(str::to_owned);
    Some(match name {
        Some(name) => Target::Object { resource, namespace, name: name.to_owned() },
        None => Target::Collection { resource, namespace },
    })
}

fn discovery(path: &str) -> Option<&'static [u8]> {
    Some(match path.trim_end_matches('/') {
        "/version" => include_bytes!("../fixtures/version.json"),
        "/api" => include_bytes!("../fixtures/discovery-api.json"),
        "/apis" => include_bytes!("../fixtures/discovery-apis.json"),
        "/api/v1" => include_bytes!("../fixtures/discovery-api-v1.json"),
        "/apis/discovery.k8s.io/v1" => include_bytes!("../fixtures/discovery-discovery.k8s.io-v1.json"),
        _ => return None,
    })
}

async fn handle(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let query = parse_query(req.uri().query());
    if let Some(admin) = path.strip_prefix(ADMIN_PREFIX) {
        let method = req.method().clone();
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return json_response(400, &json!({"error": format!("reading the body: {e}")})),
        };
        return admin_api(shared, &method, admin, &query, &body);
    }
    shared.lock().log_request(format!("{} {}", req.method(), req.uri()));
    if matches!(*req.method(), Method::POST | Method::PUT) {
        return write(shared, req).await;
    }
    if req.method() != Method::GET {
        return method_not_allowed();
    }
    if let Some(bytes) = discovery(&path) {
        return response(200, full(bytes));
    }
    match route(&path) {
        None => not_found(),
        Some(Target::Object { resource, namespace, name }) => {
            let object = shared.lock().get(resource, namespace.as_deref().unwrap_or(""), &name);
            match object {
                Some(o) => json_response(200, &o),
                None => json_response(
                    404,
                    &status(
                        404,
                        Some("NotFound"),
                        &format!("{} \"{name}\" not found", resource.plural()),
                        Some(json!({"name": name, "kind": resource.plural()})),
                    ),
                ),
            }
        }
        Some(Target::Collection { resource, namespace }) => {
            let selection = match selection(namespace, &query) {
                Ok(s) => s,
                Err(e) => return error_response(&e),
            };
            if is_true(query.get("watch")) {
                watch(shared, resource, selection, &query)
            } else {
                list(shared, resource, selection, &query)
            }
        }
    }
}

/// POST (create) to a Lease collection, PUT (replace) of a Lease: [`Store::create`],
/// [`Store::replace`]. The double serves other kinds read-only (405, as for a verb RBAC
/// does not grant it would be 403; tests script them through the admin API).
async fn write(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let target = route(req.uri().path());
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return json_response(400, &status(400, Some("BadRequest"), &format!("reading the body: {e}"), None)),
    };
    let object = match serde_json::from_slice::<Value>(&body) {
        Ok(o) => o,
        Err(e) => {
            return json_response(400, &status(400, Some("BadRequest"), &format!("the body is not JSON: {e}"), None))
        }
    };
    let result = match (method, target) {
        (Method::POST, Some(Target::Collection { resource: Resource::Leases, namespace: Some(ns) })) => {
            shared.lock().create(Resource::Leases, &ns, object).map(|o| (201, o))
        }
        (Method::PUT, Some(Target::Object { resource: Resource::Leases, namespace: Some(ns), name })) => {
            shared.lock().replace(Resource::Leases, &ns, &name, object).map(|o| (200, o))
        }
        (_, None) => return not_found(),
        _ => return method_not_allowed(),
    };
    match result {
        Ok((code, object)) => json_response(code, &object),
        Err(e) => error_response(&e),
    }
}

fn selection(namespace: Option<String>, query: &BTreeMap<String, String>) -> Result<Selection, ApiError> {
    let bad = |message: String| ApiError { code: 400, body: status(400, Some("BadRequest"), &message, None) };
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str)).map_err(bad)?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str)).map_err(bad)?;
    Ok(Selection { namespace, labels, fields })
}

fn list(shared: &Shared, resource: Resource, selection: Selection, query: &BTreeMap<String, String>) -> Response<Body> {
    let store = shared.lock();
    if let Some(e) = store.failure(resource, "list") {
        return error_response(&e);
    }
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => None,
        Some(Ok(l)) => Some(l),
        Some(Err(_)) => {
            let l = &query["limit"];
            return json_response(
                400,
                &status(400, Some("BadRequest"), &format!("strconv.ParseInt: parsing {l:?}: invalid syntax"), None),
            );
        }
    };
    let req = ListRequest {
        selection,
        limit,
        continue_token: query.get("continue").cloned(),
        resource_version: query.get("resourceVersion").cloned(),
        resource_version_match: query.get("resourceVersionMatch").cloned(),
    };
    match store.list(resource, &req) {
        Ok(v) => json_response(200, &v),
        Err(e) => error_response(&e),
    }
}

fn watch(
    shared: &Arc<Shared>,
    resource: Resource,
    selection: Selection,
    query: &BTreeMap<String, String>,
) -> Response<Body> {
    if is_true(query.get("sendInitialEvents")) {
        // kube-apiserver 1.28 without the WatchList feature gate (recorded).
        return response(422, full(&include_bytes!("../fixtures/error-422-watch-sendinitialevents.json")[..]));
    }
    let (tx, rx) = unbounded_channel::<Frame>();
    let req = WatchRequest {
        selection,
        resource_version: query.get("resourceVersion").cloned(),
        bookmarks: is_true(query.get("allowWatchBookmarks")),
    };
    let timeout = query.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).filter(|&t| t > 0);
    let started = {
        let mut store = shared.lock();
        if let Some(e) = store.failure(resource, "watch") {
            return error_response(&e);
        }
        store.watch(resource, req, tx.clone())
    };
    match started {
        Ok(Some(id)) => {
            tokio::spawn(watch_timers(shared.clone(), id, tx, timeout.map(Duration::from_secs)));
        }
        Ok(None) => {}
        Err(e) => return error_response(&e),
    }
    // After an abort, nothing more: hyper cuts the connection on the error.
    let stream = futures::stream::unfold((rx, false), |(mut rx, aborted)| async move {
        if aborted {
            return None;
        }
        match rx.recv().await? {
            Frame::Data(b) => Some((Ok(BodyFrame::data(b)), (rx, false))),
            Frame::End => None,
            Frame::Abort => Some((
                Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "watch dropped by the test")),
                (rx, true),
            )),
        }
    });
    response(200, StreamBody::new(stream).boxed_unsync())
}

/// Periodic bookmarks, the bookmark 2 s before `timeoutSeconds` (as kube-apiserver
/// sends it), and the clean end at `timeoutSeconds`.
async fn watch_timers(shared: Arc<Shared>, id: u64, tx: UnboundedSender<Frame>, timeout: Option<Duration>) {
    let start = Instant::now();
    let deadline = timeout.map(|t| start + t);
    let before_deadline = timeout.filter(|t| *t > Duration::from_secs(2)).map(|t| start + t - Duration::from_secs(2));
    let mut next_bookmark = start + shared.bookmark_interval;
    let mut pre_sent = false;
    loop {
        let mut wake = next_bookmark;
        if let Some(b) = before_deadline.filter(|_| !pre_sent) {
            wake = wake.min(b);
        }
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            shared.lock().end_watch(id);
            return;
        }
        if before_deadline.is_some_and(|b| now >= b) && !pre_sent {
            pre_sent = true;
            shared.lock().auto_bookmark(id);
        }
        if now >= next_bookmark {
            next_bookmark = now + shared.bookmark_interval;
            shared.lock().auto_bookmark(id);
        }
    }
}

fn admin_api(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Response<Body> {
    let resource = match query.get("resource").map(|r| Resource::from_plural(r).ok_or(r)) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(r)) => return json_response(400, &json!({"error": format!("unknown resource {r:?}")})),
    };
    let ok = |v: Value| json_response(200, &v);
    let err = |code: u16, e: String| json_response(code, &json!({"error": e}));
    let announce = query.get("announce").is_none_or(|a| a != "false");
    let mut store = shared.lock();
    match (method.as_str(), path) {
        ("POST", "apply") => match serde_json::from_slice::<Value>(body) {
            Ok(object) => match store.apply(object, announce) {
                Ok(rv) => ok(json!({"resourceVersion": rv.to_string()})),
                Err(e) => err(422, e),
            },
            Err(e) => err(400, format!("body is not JSON: {e}")),
        },
        ("POST", "delete") => {
            let (Some(resource), Some(name)) = (resource, query.get("name")) else {
                return err(400, "delete needs resource= and name=".into());
            };
            let ns = query.get("namespace").map_or("default", String::as_str);
            match store.delete(resource, ns, name, announce) {
                Ok(rv) => ok(json!({"resourceVersion": rv.to_string()})),
                Err(e) => err(404, e),
            }
        }
        ("GET", "object") => {
            let (Some(resource), Some(name)) = (resource, query.get("name")) else {
                return err(400, "object needs resource= and name=".into());
            };
            match store.get(resource, query.get("namespace").map_or("default", String::as_str), name) {
                Some(o) => ok(o),
                None => err(404, format!("{} {name:?} not found", resource.plural())),
            }
        }
        ("POST", "bookmark") => ok(json!({"watches": store.bookmark(resource)})),
        ("POST", "expire") => ok(json!({"watches": store.expire(resource)})),
        ("POST", "drop") => ok(json!({"watches": store.drop_watches(resource)})),
        ("POST", "end") => ok(json!({"watches": store.end_watches(resource)})),
        ("POST", "raw") => ok(json!({"watches": store.push_raw(resource, &String::from_utf8_lossy(body))})),
        ("GET", "watches") => ok(json!({"watches": store.watch_count(resource)})),
        ("GET", "requests") => ok(json!({"requests": store.requests()})),
        ("GET", "resourceversion") => ok(json!({"resourceVersion": store.resource_version().to_string()})),
        _ => err(404, format!("no admin endpoint {method} {ADMIN_PREFIX}{path}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = parse_query(Some(
            "labelSelector=kubernetes.io%2Fservice-name%2C%21service.kubernetes.io%2Fheadless&watch=true&x=a+b",
        ));
        assert_eq!(q["labelSelector"], "kubernetes.io/service-name,!service.kubernetes.io/headless");
        assert_eq!(q["x"], "a b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }

    #[test]
    fn routes() {
        assert!(matches!(
            route("/api/v1/services"),
            Some(Target::Collection { resource: Resource::Services, namespace: None })
        ));
        assert!(matches!(
            route("/apis/discovery.k8s.io/v1/namespaces/demo/endpointslices"),
            Some(Target::Collection { resource: Resource::EndpointSlices, namespace: Some(_) })
        ));
        assert!(matches!(route("/api/v1/nodes/gw-1"), Some(Target::Object { resource: Resource::Nodes, .. })));
        assert!(route("/api/v1/namespaces/x/nodes").is_none());
        assert!(route("/apis/discovery.k8s.io/v1/nosuchresources").is_none());
    }
}
