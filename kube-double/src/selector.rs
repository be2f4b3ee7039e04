//! Label and field selectors, as the API server parses and applies them to lists and
//! watches.
//!
//! Label selectors ([Labels and Selectors]): comma-separated requirements, all of which
//! must hold: `key`, `!key`, `key=value`, `key==value`, `key!=value`,
//! `key in (a,b)`, `key notin (a,b)`. Field selectors: `metadata.name` and
//! `metadata.namespace` with `=`, `==` or `!=` (the only fields the API server supports
//! for Services, EndpointSlices and Nodes; anything else is a 400, as recorded in
//! `error-400-unsupported-field-selector.json`).
//!
//! [Labels and Selectors]: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits at commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unable to parse requirement: unexpected ')'".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unable to parse requirement: found '', expected: ',' or ')'".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    /// Parses `s` (URL-decoded already).
    ///
    /// # Errors
    /// A message like the API server's when `s` is not a label selector.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Self::default());
        }
        let mut reqs = Vec::new();
        for part in split_top_level(s)? {
            let part = part.trim();
            let bad = || format!("unable to parse requirement: {part:?}");
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                LabelReq::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(open) = part.find('(') {
                let head = part[..open].trim();
                let (k, op) = head.rsplit_once(char::is_whitespace).ok_or_else(bad)?;
                let set = parse_set(&part[open..]).ok_or_else(bad)?;
                match op {
                    "in" => LabelReq::In(k.trim().to_owned(), set),
                    "notin" => LabelReq::NotIn(k.trim().to_owned(), set),
                    _ => return Err(bad()),
                }
            } else {
                LabelReq::Exists(part.to_owned())
            };
            let key = match &req {
                LabelReq::Exists(k)
                | LabelReq::NotExists(k)
                | LabelReq::Equals(k, _)
                | LabelReq::NotEquals(k, _)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether `object`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
        })
    }
}

fn parse_set(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect())
}

/// A parsed field selector over `metadata.name` and `metadata.namespace`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `s` (URL-decoded already).
    ///
    /// # Errors
    /// The API server's message for a field it does not support, e.g.
    /// `"spec.type" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Self::default());
        }
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: '{part}'; can't understand '{part}'"));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(format!(
                    "\"{field}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                ));
            }
            reqs.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether `object` satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let key = if field == "metadata.name" { "/metadata/name" } else { "/metadata/namespace" };
            let actual = object.pointer(key).and_then(Value::as_str).unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "demo", "labels": labels}})
    }

    #[test]
    fn kube_proxy_selectors() {
        let s = LabelSelector::parse("kubernetes.io/service-name,!service.kubernetes.io/headless").unwrap();
        assert!(s.matches(&obj(json!({"kubernetes.io/service-name": "web"}))));
        assert!(!s.matches(&obj(json!({"kubernetes.io/service-name": "h", "service.kubernetes.io/headless": ""}))));
        assert!(!s.matches(&obj(json!({}))));
        let s = LabelSelector::parse("!service.kubernetes.io/service-proxy-name").unwrap();
        assert!(s.matches(&json!({"metadata": {"name": "x"}})));
    }

    #[test]
    fn equality_and_sets() {
        let s = LabelSelector::parse("app=web, tier!=db").unwrap();
        assert!(s.matches(&obj(json!({"app": "web"}))));
        assert!(!s.matches(&obj(json!({"app": "web", "tier": "db"}))));
        let s = LabelSelector::parse("app in (web, api),env notin (prod)").unwrap();
        assert!(s.matches(&obj(json!({"app": "api"}))));
        assert!(!s.matches(&obj(json!({"app": "api", "env": "prod"}))));
        assert!(!s.matches(&obj(json!({"env": "dev"}))));
        assert!(LabelSelector::parse("app in (web").is_err());
    }

    #[test]
    fn field_selectors() {
        let s = FieldSelector::parse("metadata.name=gw-1").unwrap();
        assert!(s.matches(&json!({"metadata": {"name": "gw-1"}})));
        assert!(!s.matches(&json!({"metadata": {"name": "node-2"}})));
        let e = FieldSelector::parse("spec.type=NodePort").unwrap_err();
        assert_eq!(e, "\"spec.type\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"");
    }
}
