//! [`Compiler`]: [`compile`](super::compile) kept up to date object change by object
//! change, for the daemon.
//!
//! The compiler keeps every valid object it was given (validated once: an object whose
//! `metadata.resourceVersion` did not change is not looked at again), and for every
//! Service its draft (front doors with their chosen backends) and its output (the front
//! doors it owns after conflicts, its errors and warnings). A change marks the Services it
//! touches: a Service itself, the Service an EndpointSlice belongs to (before and after the
//! change), or every Service when the gateway's own Node changes (NodePort addresses,
//! zone). Only marked Services are compiled again; a front door whose claimants changed
//! has all its claimants resolved again. [`Compiled`] and its [`TableSpec`] are then
//! patched where those Services' front doors changed: a change of one endpoint costs a
//! fraction of a millisecond at 10 000 Services (BENCHMARKS.md), mostly spent keeping the
//! table spec's indices in order.
//!
//! The results are those of the pure path, exactly: after [`Compiler::update`] with a
//! source snapshot, [`Compiler::compiled`] equals [`crate::compile_loaded`] of it, and
//! [`Compiler::table_spec`] equals its [`Compiled::to_table_spec`] (property-tested against
//! random edits in this module's tests), as long as an object that changed has a new
//! `metadata.resourceVersion` or none: the API server guarantees it, and the manifests
//! source versions objects by their content (`crate::source::files`). Objects changed
//! through [`Compiler::apply`] have no source location; their model errors come after the
//! located ones, sorted by object.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

// aHash rather than SipHash: these maps are probed for every object of every compile.
use ahash::AHashMap as HashMap;

use torii_table::TableSpec;

use super::{
    frontend_spec, sort_frontends, update_claims, Claims, CompileOptions, Compiled, Draft, Frontend, Gateway, Output,
    ServiceSpecKey,
};
use crate::model::{
    duplicate_error, EndpointSlice, KubeObject, ModelError, Node, ObjectRef, Service, ServiceKey, Skipped, Validated,
};
use crate::source::Loaded;

/// One change of the cluster state, as a watch reports it.
#[derive(Clone, Debug)]
pub enum Change<'a> {
    /// An object was added or modified (or listed).
    Upsert(&'a KubeObject),
    /// The object with this identity was deleted.
    Delete(ObjectRef),
}

/// Work counters of a [`Compiler`], for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompilerStats {
    /// Objects validated (the others were skipped by resourceVersion).
    pub validated: u64,
    /// Service drafts computed.
    pub drafts: u64,
    /// Times everything was compiled again (first load, gateway Node changes, large
    /// batches).
    pub full_rebuilds: u64,
    /// Updates ([`Compiler::update`], [`Compiler::apply`]) so far.
    pub updates: u64,
}

/// What the compiler remembers of an object it holds.
#[derive(Clone, Debug, Default)]
struct Known {
    /// `metadata.resourceVersion`, when it had one.
    version: Option<String>,
    /// The last [`Compiler::update`] whose snapshot had it.
    epoch: u64,
}

/// An EndpointSlice's identity: namespace and name.
type SliceId = (String, String);

/// A Service known to the compiler. `model` is `None` for a Service deleted (or made
/// invalid) since the last flush, until the flush removes its front doors.
#[derive(Debug, Default)]
struct ServiceState {
    model: Option<Service>,
    draft: Option<Draft>,
    output: Output,
}

/// The incremental compiler (see the module documentation).
///
/// ```no_run
/// # use torii_control::compile::{Change, CompileOptions, Compiler};
/// # use torii_control::model::KubeObject;
/// # fn watch_event() -> KubeObject { unimplemented!() }
/// let mut compiler = Compiler::new(CompileOptions { node_name: "gw-1".into(), ..Default::default() });
/// let object = watch_event();
/// let compiled = compiler.apply([Change::Upsert(&object)]);
/// println!("{} front doors", compiled.frontends.len());
/// let spec = compiler.table_spec(); // hand to a TableBuilder / Publisher::publish_with
/// # let _ = spec;
/// ```
#[derive(Debug)]
pub struct Compiler {
    options: CompileOptions,
    gateway: Gateway,
    node: Option<Node>,
    /// Boxed: a B-tree node is about half full after the initial list, and a
    /// `ServiceState` is several hundred bytes.
    services: BTreeMap<ServiceKey, Box<ServiceState>>,
    /// Boxed: the table has room for an eighth more entries than it holds.
    slices: HashMap<SliceId, Box<EndpointSlice>>,
    /// The slices of each Service, sorted (almost always one: a vector, not a set).
    slices_of: HashMap<ServiceKey, Vec<SliceId>>,
    /// Every object present (valid or not).
    known: HashMap<ObjectRef, Known>,
    /// Counts [`Compiler::update`]s, to tell the objects a snapshot had from the others.
    epoch: u64,
    /// What validation left out of each present object.
    problems: BTreeMap<ObjectRef, Vec<(ModelError, Skipped)>>,
    /// Input index and location of the objects of the last [`Compiler::update`].
    origin: HashMap<ObjectRef, (usize, Option<String>)>,
    /// Errors of the last [`Compiler::update`] not tied to a present object: later
    /// duplicates and unnamed objects, by input index.
    loose: Vec<(usize, String)>,
    /// The source's own errors from the last [`Compiler::update`].
    source_errors: Vec<String>,
    claims: Claims,
    /// Services whose outputs have errors or warnings.
    with_messages: BTreeSet<ServiceKey>,
    /// Served Services that ask for NodePorts (their drafts say so).
    node_port_wanters: usize,
    /// Services to compile again at the next flush.
    dirty: BTreeSet<ServiceKey>,
    /// Compile everything again at the next flush.
    all_dirty: bool,
    compiled: Compiled,
    spec: TableSpec,
    /// Front doors per `spec.services` entry.
    spec_refs: Vec<usize>,
    /// Counts the changes of `spec`.
    spec_version: u64,
    /// The names of the `spec.services` entries inserted or removed, with the
    /// `spec_version` they were at, oldest first ([`Compiler::touched_since`]); complete
    /// for the versions from `touched_floor` on.
    touched: Vec<(u64, String)>,
    touched_floor: u64,
    stats: CompilerStats,
}

/// How many entries [`Compiler::touched_since`] keeps at most: past it the older half
/// goes (a publisher that far behind compares every service, as after a rebuild).
const TOUCHED_KEEP: usize = 4096;

impl Compiler {
    /// A compiler with no objects for the gateway `options` describes.
    pub fn new(options: CompileOptions) -> Self {
        Self {
            gateway: Gateway::new(None, &options),
            options,
            node: None,
            services: BTreeMap::new(),
            slices: HashMap::new(),
            slices_of: HashMap::new(),
            known: HashMap::new(),
            epoch: 0,
            problems: BTreeMap::new(),
            origin: HashMap::new(),
            loose: Vec::new(),
            source_errors: Vec::new(),
            claims: Claims::new(),
            with_messages: BTreeSet::new(),
            node_port_wanters: 0,
            dirty: BTreeSet::new(),
            all_dirty: true,
            compiled: Compiled::default(),
            spec: TableSpec::default(),
            spec_refs: Vec::new(),
            spec_version: 0,
            touched: Vec::new(),
            touched_floor: 0,
            stats: CompilerStats::default(),
        }
    }

    /// The options it compiles with.
    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// The current result: what [`super::compile`] gives for the objects it holds.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The current table, equal to `self.compiled().to_table_spec()`.
    pub fn table_spec(&self) -> &TableSpec {
        &self.spec
    }

    /// A number that changes whenever [`Compiler::table_spec`] does (and, rarely, when
    /// it does not): equal numbers mean equal tables, so a daemon need not compare or
    /// keep a copy of the table it published.
    pub fn table_version(&self) -> u64 {
        self.spec_version
    }

    /// Work done so far.
    pub fn stats(&self) -> CompilerStats {
        self.stats
    }

    /// The identities of every object it holds (valid or not), e.g. to find the objects
    /// a relist no longer has.
    pub fn known_objects(&self) -> impl Iterator<Item = &ObjectRef> {
        self.known.keys()
    }

    /// Replaces everything with a complete source snapshot (the manifests directory, or a
    /// relist): objects not in `loaded` are deleted, the others upserted, in input order
    /// (a later object with the same kind, namespace and name is an error, as in
    /// [`crate::model::Objects::from_kube`]). Returns exactly [`crate::compile_loaded`]`(loaded)`.
    pub fn update(&mut self, loaded: &Loaded) -> &Compiled {
        self.epoch += 1;
        let epoch = self.epoch;
        self.origin.clear();
        self.loose.clear();
        for (index, object) in loaded.objects.iter().enumerate() {
            let r = object.object_ref();
            let location = || loaded.locations.get(index).map(ToString::to_string);
            if r.name.is_empty() {
                // Never valid (metadata.name is required) and not identifiable.
                if let Err(e) = Validated::from_kube(object) {
                    self.loose.push((index, message(&e, Skipped::Object, location().as_deref())));
                }
                continue;
            }
            match self.known.get_mut(&r) {
                Some(k) if k.epoch == epoch => {
                    self.loose.push((index, message(&duplicate_error(r), Skipped::Object, location().as_deref())));
                    continue;
                }
                Some(k) => k.epoch = epoch,
                None => {
                    self.known.insert(r.clone(), Known { version: None, epoch });
                }
            }
            self.upsert(&r, object);
            if self.problems.contains_key(&r) {
                self.origin.insert(r, (index, location()));
            }
        }
        let gone: Vec<ObjectRef> =
            self.known.iter().filter(|(_, k)| k.epoch != epoch).map(|(r, _)| r.clone()).collect();
        for r in gone {
            self.remove(&r);
        }
        self.source_errors = loaded.errors.iter().map(ToString::to_string).collect();
        self.flush();
        &self.compiled
    }

    /// Replaces the source's own errors (objects it could not read, e.g. ones that do not
    /// deserialize), which lead [`Compiled::errors`]; they take effect with the next
    /// [`Compiler::apply`] (an [`Compiler::update`] replaces them with its snapshot's).
    pub fn set_source_errors(&mut self, errors: Vec<String>) {
        self.source_errors = errors;
    }

    /// Applies watch events and returns the new result.
    pub fn apply<'a>(&mut self, changes: impl IntoIterator<Item = Change<'a>>) -> &Compiled {
        for change in changes {
            match change {
                Change::Upsert(object) => {
                    let r = object.object_ref();
                    self.origin.remove(&r);
                    self.upsert(&r, object);
                }
                Change::Delete(r) => {
                    self.origin.remove(&r);
                    self.remove(&r);
                }
            }
        }
        self.flush();
        &self.compiled
    }

    /// Validates and stores one object (skipped when its resourceVersion is the one held).
    fn upsert(&mut self, r: &ObjectRef, object: &KubeObject) {
        let version = object.metadata().resource_version.as_deref().filter(|v| !v.is_empty());
        let known = match self.known.get_mut(r) {
            Some(k) => k,
            None => self.known.entry(r.clone()).or_insert(Known { version: None, epoch: self.epoch }),
        };
        if version.is_some() && known.version.as_deref() == version {
            return;
        }
        known.version = version.map(str::to_owned);
        self.stats.validated += 1;
        let r = r.clone();
        self.problems.remove(&r);
        let valid = Validated::from_kube(object);
        if let Some(parts) = valid.as_ref().map(Validated::skipped_parts).ok().filter(|p| !p.is_empty()) {
            self.problems.insert(r.clone(), parts);
        }
        match valid {
            Ok(Validated::Service(s)) => self.store_service(&r, Some(s)),
            Ok(Validated::EndpointSlice(s)) => self.store_slice(&r, Some(s)),
            Ok(Validated::Node(n)) => self.store_node(&r, Some(n)),
            Err(e) => {
                // The previous valid version, if any, is not served any more.
                self.problems.insert(r.clone(), vec![(e, Skipped::Object)]);
                self.store_none(&r);
            }
        }
    }

    /// Forgets an object.
    fn remove(&mut self, r: &ObjectRef) {
        self.known.remove(r);
        self.problems.remove(r);
        self.store_none(r);
    }

    /// Forgets the valid version of object `r`, if any.
    fn store_none(&mut self, r: &ObjectRef) {
        match r.kind {
            "Service" => self.store_service(r, None),
            "EndpointSlice" => self.store_slice(r, None),
            _ => self.store_node(r, None),
        }
    }

    fn store_service(&mut self, r: &ObjectRef, model: Option<Service>) {
        let key = ServiceKey { namespace: r.namespace.clone().unwrap_or_default(), name: r.name.clone() };
        match self.services.get_mut(&key) {
            Some(state) if state.model == model => return,
            Some(state) => state.model = model,
            None if model.is_none() => return,
            None => {
                self.services.insert(key.clone(), Box::new(ServiceState { model, ..ServiceState::default() }));
            }
        }
        self.dirty.insert(key);
    }

    fn store_slice(&mut self, r: &ObjectRef, model: Option<EndpointSlice>) {
        let id = (r.namespace.clone().unwrap_or_default(), r.name.clone());
        let old = self.slices.remove(&id);
        if old.as_deref() == model.as_ref() {
            if let Some(m) = old {
                self.slices.insert(id, m);
            }
            return;
        }
        if let Some(old) = old {
            if let Some(set) = self.slices_of.get_mut(&old.service) {
                if let Ok(i) = set.binary_search(&id) {
                    set.remove(i);
                }
                if set.is_empty() {
                    self.slices_of.remove(&old.service);
                }
            }
            self.dirty.insert(old.service);
        }
        if let Some(new) = model {
            let set = self.slices_of.entry(new.service.clone()).or_default();
            if let Err(i) = set.binary_search(&id) {
                set.reserve_exact(1);
                set.insert(i, id.clone());
            }
            self.dirty.insert(new.service.clone());
            self.slices.insert(id, Box::new(new));
        }
    }

    fn store_node(&mut self, r: &ObjectRef, model: Option<Node>) {
        // Only the gateway's own Node matters (NodePort addresses, zone).
        if r.name == self.options.node_name && self.node != model {
            self.node = model;
        }
    }

    /// The slices of `key`, in identity order.
    fn slices_of(&self, key: &ServiceKey) -> Vec<&EndpointSlice> {
        self.slices_of.get(key).into_iter().flatten().filter_map(|id| self.slices.get(id).map(|s| &**s)).collect()
    }

    /// Brings drafts, outputs, [`Compiled`] and the table spec up to date.
    fn flush(&mut self) {
        self.stats.updates += 1;
        let gateway = Gateway::new(self.node.as_ref(), &self.options);
        if gateway != self.gateway {
            self.gateway = gateway;
            self.all_dirty = true;
        }
        // Past a fraction of the Services, patching costs more than starting over.
        if self.all_dirty || self.dirty.len() * 8 > self.services.len().max(64) {
            self.rebuild();
        } else {
            self.patch();
        }
        // Deleted Services are dirty: forget them now that their front doors are gone.
        for key in std::mem::take(&mut self.dirty) {
            if self.services.get(&key).is_some_and(|s| s.model.is_none()) {
                self.services.remove(&key);
            }
        }
        self.all_dirty = false;
        self.assemble_messages();
    }

    /// Compiles every Service again and rebuilds [`Compiled`] and the spec.
    fn rebuild(&mut self) {
        self.stats.full_rebuilds += 1;
        self.claims.clear();
        self.node_port_wanters = 0;
        let keys: Vec<ServiceKey> = self.services.keys().cloned().collect();
        for key in &keys {
            let draft = self.draft(key);
            if let Some(d) = &draft {
                update_claims(&mut self.claims, key, d, true);
                self.node_port_wanters += usize::from(d.wants_node_ports);
            }
            if let Some(state) = self.services.get_mut(key) {
                state.draft = draft;
            }
        }
        let mut frontends = Vec::new();
        self.with_messages.clear();
        for (key, state) in &mut self.services {
            state.output = match &state.draft {
                Some(d) => Output::resolve(key, d, &self.claims),
                None => Output::default(),
            };
            frontends.extend(state.output.frontends.iter().map(|f| Frontend::clone(f)));
            if !state.output.errors.is_empty() || !state.output.warnings.is_empty() {
                self.with_messages.insert(key.clone());
            }
        }
        sort_frontends(&mut frontends);
        frontends.shrink_to_fit();
        self.compiled.frontends = frontends;
        let spec = self.compiled.to_table_spec();
        if spec != self.spec {
            self.spec = spec;
            self.spec_version += 1;
            self.touched.clear();
            self.touched_floor = self.spec_version;
        }
        self.spec_refs = vec![0; self.spec.services.len()];
        for f in &self.spec.frontends {
            self.spec_refs[f.service] += 1;
        }
    }

    /// The draft of Service `key` from its current model and slices.
    fn draft(&mut self, key: &ServiceKey) -> Option<Draft> {
        let model = self.services.get(key)?.model.as_ref()?;
        self.stats.drafts += 1;
        Draft::new(model, &self.slices_of(key), &self.gateway, &self.options)
    }

    /// Compiles the dirty Services again and patches the results.
    fn patch(&mut self) {
        let dirty: Vec<ServiceKey> = self.dirty.iter().cloned().collect();
        let mut affected = BTreeSet::new();
        for key in dirty {
            let new = self.draft(&key);
            let Some(state) = self.services.get_mut(&key) else { continue };
            if state.draft == new {
                continue;
            }
            let old = std::mem::replace(&mut state.draft, new);
            let wants = |d: &Option<Draft>| usize::from(d.as_ref().is_some_and(|d| d.wants_node_ports));
            self.node_port_wanters = self.node_port_wanters + wants(&state.draft) - wants(&old);
            affected.insert(key.clone());
            let state = &self.services[&key];
            let old_claims: Vec<_> =
                old.iter().flat_map(|d| d.claims()).map(|(k, (p, c))| (k, p.to_owned(), c)).collect();
            let new_claims: Vec<_> =
                state.draft.iter().flat_map(|d| d.claims()).map(|(k, (p, c))| (k, p.to_owned(), c)).collect();
            if old_claims == new_claims {
                continue;
            }
            if let Some(d) = &old {
                update_claims(&mut self.claims, &key, d, false);
            }
            if let Some(d) = &self.services[&key].draft {
                update_claims(&mut self.claims, &key, d, true);
            }
            // Every claimant of a front door this Service claimed or claims may gain or
            // lose it, or its messages may name this Service's port.
            for (door, ..) in old_claims.iter().chain(&new_claims) {
                if let Some(c) = self.claims.get(door) {
                    affected.extend(c.iter().map(|(k, _)| k.clone()));
                }
            }
        }
        for key in affected {
            let Some(state) = self.services.get_mut(&key) else { continue };
            let output = match &state.draft {
                Some(d) => Output::resolve(&key, d, &self.claims),
                None => Output::default(),
            };
            if output == state.output {
                continue;
            }
            let old = std::mem::replace(&mut state.output, output);
            let has_messages = !state.output.errors.is_empty() || !state.output.warnings.is_empty();
            let new_frontends = state.output.frontends.clone();
            if has_messages {
                self.with_messages.insert(key.clone());
            } else {
                self.with_messages.remove(&key);
            }
            self.replace_frontends(&old.frontends, &new_frontends);
        }
    }

    /// Replaces one Service's front doors `old` by `new` in [`Compiled`] and the spec. A
    /// front door that moved to another Service may already be that Service's (it was
    /// patched first): it is only removed while it is still `old`'s.
    fn replace_frontends(&mut self, old: &[Arc<Frontend>], new: &[Arc<Frontend>]) {
        let new_keys: BTreeSet<_> = new.iter().map(|f| f.key()).collect();
        for f in old.iter().filter(|f| !new_keys.contains(&f.key())) {
            let found = self.compiled.frontends.binary_search_by_key(&f.key(), Frontend::key);
            if let Some(i) = found.ok().filter(|&i| self.compiled.frontends[i] == **f) {
                self.compiled.frontends.remove(i);
                self.spec_version += 1;
                let s = self.spec.frontends.remove(i).service;
                self.release(s);
            }
        }
        for f in new {
            match self.compiled.frontends.binary_search_by_key(&f.key(), Frontend::key) {
                Ok(i) => {
                    if self.compiled.frontends[i] == **f {
                        continue;
                    }
                    self.spec_version += 1;
                    let s = self.acquire(f);
                    let previous = self.spec.frontends[i].service;
                    self.compiled.frontends[i] = Frontend::clone(f);
                    self.spec.frontends[i] = frontend_spec(f, s);
                    self.release(previous);
                }
                Err(i) => {
                    self.spec_version += 1;
                    let s = self.acquire(f);
                    self.compiled.frontends.insert(i, Frontend::clone(f));
                    self.spec.frontends.insert(i, frontend_spec(f, s));
                }
            }
        }
    }

    /// The index of front door `f`'s backend set in the spec, inserted (in sort order) if
    /// new; counts one more reference to it.
    fn acquire(&mut self, f: &Frontend) -> usize {
        let name = f.table_name();
        let key = ServiceSpecKey::of(f, &name);
        match self.spec.services.binary_search_by(|s| key.cmp_spec(s)) {
            Ok(i) => {
                self.spec_refs[i] += 1;
                i
            }
            Err(i) => {
                self.touch(name.clone());
                self.spec.services.insert(i, key.to_spec());
                self.spec_refs.insert(i, 1);
                for fs in &mut self.spec.frontends {
                    if fs.service >= i {
                        fs.service += 1;
                    }
                }
                i
            }
        }
    }

    /// Notes that a `spec.services` entry named `name` was inserted or removed.
    fn touch(&mut self, name: String) {
        if self.touched.len() >= TOUCHED_KEEP {
            let newest_dropped = self.touched[TOUCHED_KEEP / 2 - 1].0;
            self.touched.drain(..TOUCHED_KEEP / 2);
            self.touched_floor = self.touched_floor.max(newest_dropped);
        }
        self.touched.push((self.spec_version, name));
    }

    /// The names of the table spec's services that may differ from those of the spec of
    /// [`Compiler::table_version`] `version` (services of any other name are the same,
    /// in the same order): the ones inserted or removed since. `None` when that is not
    /// known (`version` is older than the last full rebuild or the kept record).
    pub fn touched_since(&self, version: u64) -> Option<ahash::AHashSet<&str>> {
        if version < self.touched_floor || version > self.spec_version {
            return None;
        }
        let first = self.touched.partition_point(|(v, _)| *v <= version);
        Some(self.touched[first..].iter().map(|(_, n)| n.as_str()).collect())
    }

    /// Counts one reference less to spec service `i`, removing it when none is left.
    fn release(&mut self, i: usize) {
        self.spec_refs[i] -= 1;
        if self.spec_refs[i] == 0 {
            let gone = self.spec.services.remove(i);
            self.touch(gone.name);
            self.spec_refs.remove(i);
            for fs in &mut self.spec.frontends {
                if fs.service > i {
                    fs.service -= 1;
                }
            }
        }
    }

    /// [`Compiled::errors`] and [`Compiled::warnings`], in [`crate::compile_loaded`]'s order.
    fn assemble_messages(&mut self) {
        let mut errors = self.source_errors.clone();
        let mut model: Vec<(usize, &ObjectRef, String)> = Vec::new();
        for (r, parts) in &self.problems {
            let (index, location) = match self.origin.get(r) {
                Some((i, l)) => (*i, l.as_deref()),
                None => (usize::MAX, None),
            };
            model.extend(parts.iter().map(|(e, skipped)| (index, r, message(e, *skipped, location))));
        }
        let loose_ref = ObjectRef { kind: "", namespace: None, name: String::new() };
        model.extend(self.loose.iter().map(|(i, m)| (*i, &loose_ref, m.clone())));
        // Stable: the parts of one object keep their order.
        model.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        errors.extend(model.into_iter().map(|(.., m)| m));

        let mut warnings = Vec::new();
        if self.node_port_wanters > 0 {
            warnings.extend(self.gateway.node_port_warning(&self.options));
        }
        for key in &self.with_messages {
            if let Some(s) = self.services.get(key) {
                errors.extend(s.output.errors.iter().cloned());
                warnings.extend(s.output.warnings.iter().cloned());
            }
        }
        self.compiled.errors = errors;
        self.compiled.warnings = warnings;
    }
}

/// An error line as [`crate::compile_loaded`] prints it.
fn message(e: &ModelError, skipped: Skipped, location: Option<&str>) -> String {
    match location {
        Some(l) => format!("{l}: {e}; {} skipped", skipped.as_str()),
        None => format!("{e}; {} skipped", skipped.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::config::NodePortAddresses;
    use serde_json::{json, Value};
    use torii_table::IpCidr;
    use torii_table::{build, TableBuilder};

    use super::*;
    use crate::model::Objects;
    use crate::source::DocumentLocation;

    /// xorshift64*: a small deterministic generator driven by proptest's seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len() as u64) as usize]
        }
    }

    const NAMESPACES: [&str; 2] = ["a", "b"];

    fn service(rng: &mut Rng, ns: &str, i: u64) -> Value {
        let type_ = rng.pick(&["ClusterIP", "NodePort", "LoadBalancer", "LoadBalancer", "NodePort", "ExternalName"]);
        let mut spec = json!({"type": type_});
        match rng.below(10) {
            0 => spec["clusterIP"] = json!("None"),
            1 => {}
            2..=4 => {
                spec["clusterIPs"] = json!([format!("10.96.{ns_n}.{i}", ns_n = ns.len()), format!("fd00:96::{i}")])
            }
            _ => spec["clusterIP"] = json!(format!("10.96.0.{}", i + 10 * u64::from(ns == "b"))),
        }
        let ext: Vec<&str> = (0..rng.below(3))
            .map(|_| rng.pick(&["192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::1", "2001:db8::2"]))
            .collect();
        spec["externalIPs"] = json!(ext);
        let mut ports = Vec::new();
        for p in 0..1 + rng.below(2) {
            let number = [80, 443, 80][rng.below(3) as usize] + p as i32;
            let protocol = rng.pick(&["TCP", "TCP", "UDP"]);
            let mut port = json!({"name": format!("p{p}"), "port": number, "protocol": protocol});
            if rng.chance(60) {
                port["nodePort"] = json!(30000 + rng.below(3) as i32);
            }
            if rng.chance(50) {
                port["targetPort"] =
                    json!(rng.pick(&["web", "8080"]).parse::<i32>().map(Value::from).unwrap_or(json!("web")));
            }
            if rng.chance(3) {
                port["port"] = json!(0); // invalid: the whole Service is skipped
            }
            ports.push(port);
        }
        spec["ports"] = json!(ports);
        if rng.chance(30) {
            spec["externalTrafficPolicy"] = json!("Local");
        }
        if rng.chance(20) {
            spec["internalTrafficPolicy"] = json!("Local");
        }
        if rng.chance(20) {
            spec["sessionAffinity"] = json!("ClientIP");
        }
        if rng.chance(20) {
            spec["loadBalancerClass"] = json!(rng.pick(&["x/a", "x/b"]));
        }
        if rng.chance(25) {
            let ranges = rng.pick(&["198.51.100.0/24", "2001:db8::/32,10.0.0.0/8", "bogus,192.0.2.0/25"]);
            spec["loadBalancerSourceRanges"] = json!(ranges.split(',').collect::<Vec<_>>());
        }
        let mut meta = json!({"name": format!("s{i}"), "namespace": ns});
        if rng.chance(15) {
            meta["labels"] = json!({"service.kubernetes.io/service-proxy-name": rng.pick(&["torii", "other"])});
        }
        let ingress: Vec<Value> = (0..rng.below(2))
            .map(|_| {
                let ip = rng.pick(&["198.51.100.1", "198.51.100.2", "2001:db8::9"]);
                if rng.chance(20) {
                    json!({"ip": ip, "ipMode": "Proxy"})
                } else {
                    json!({"ip": ip})
                }
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec,
               "status": {"loadBalancer": {"ingress": ingress}}})
    }

    fn slice(rng: &mut Rng, ns: &str, i: u64, j: u64) -> Value {
        let v6 = rng.chance(30);
        let endpoints: Vec<Value> = (0..rng.below(5))
            .map(|_| {
                let ip = if v6 {
                    rng.pick(&["fd00::1", "fd00::2", "fd00::3", "::1"]).to_owned()
                } else {
                    rng.pick(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "127.0.0.1"]).to_owned()
                };
                let mut ep = json!({"addresses": [ip]});
                if rng.chance(40) {
                    ep["conditions"] =
                        json!({"ready": rng.chance(50), "serving": rng.chance(70), "terminating": rng.chance(50)});
                }
                if rng.chance(70) {
                    ep["nodeName"] = json!(rng.pick(&["gw", "n2"]));
                }
                if rng.chance(40) {
                    let mut hints = json!({"forZones": [{"name": rng.pick(&["zone-a", "zone-b"])}]});
                    if rng.chance(40) {
                        hints["forNodes"] = json!([{"name": rng.pick(&["gw", "n2"])}]);
                    }
                    ep["hints"] = hints;
                }
                ep
            })
            .collect();
        let ports: Vec<Value> =
            (0..2).map(|p| json!({"name": format!("p{p}"), "port": 8080 + p, "protocol": "TCP"})).collect();
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("s{i}-{j}"), "namespace": ns,
                            "labels": {"kubernetes.io/service-name": format!("s{i}")}},
               "addressType": if v6 { "IPv6" } else { "IPv4" }, "ports": ports, "endpoints": endpoints})
    }

    fn node(rng: &mut Rng, name: &str) -> Value {
        let addresses: Vec<Value> = [
            ("InternalIP", "198.51.100.5"),
            ("InternalIP", "10.1.0.5"),
            ("InternalIP", "fd00:1::5"),
            ("ExternalIP", "203.0.113.5"),
            ("Hostname", "gw"),
        ]
        .iter()
        .filter(|_| rng.chance(70))
        .map(|(t, a)| json!({"type": t, "address": a}))
        .collect();
        let mut meta = json!({"name": name});
        if rng.chance(70) {
            meta["labels"] = json!({"topology.kubernetes.io/zone": rng.pick(&["zone-a", "zone-b"])});
        }
        json!({"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"addresses": addresses}})
    }

    fn object(v: Value) -> KubeObject {
        match v["kind"].as_str() {
            Some("Service") => KubeObject::Service(Box::new(serde_json::from_value(v).unwrap())),
            Some("EndpointSlice") => KubeObject::EndpointSlice(Box::new(serde_json::from_value(v).unwrap())),
            _ => KubeObject::Node(Box::new(serde_json::from_value(v).unwrap())),
        }
    }

    /// A random object of a random identity (from a small set, so that edits hit
    /// existing objects and front doors collide).
    fn random_object(rng: &mut Rng) -> KubeObject {
        let ns = NAMESPACES[rng.below(2) as usize];
        let i = rng.below(6);
        object(match rng.below(10) {
            0..=3 => service(rng, ns, i),
            4..=8 => {
                let j = rng.below(2);
                slice(rng, ns, i, j)
            }
            _ => {
                let name = if rng.chance(80) { "gw" } else { "n2" };
                node(rng, name)
            }
        })
    }

    fn options(rng: &mut Rng) -> CompileOptions {
        CompileOptions {
            node_name: "gw".into(),
            cluster_ips: rng.chance(50),
            proxy_name: rng.chance(20).then(|| "torii".into()),
            load_balancer_class: rng.chance(20).then(|| "x/a".into()),
            node_port_addresses: match rng.below(4) {
                0 => NodePortAddresses::Primary,
                1 => NodePortAddresses::Cidrs(vec![IpCidr::parse("10.0.0.0/8").unwrap()]),
                _ => NodePortAddresses::All,
            },
            snat_addresses: if rng.chance(30) { vec!["10.0.0.1".parse().unwrap()] } else { Vec::new() },
        }
    }

    fn with_version(mut o: KubeObject, version: u64) -> KubeObject {
        let meta = match &mut o {
            KubeObject::Service(s) => &mut s.metadata,
            KubeObject::EndpointSlice(s) => &mut s.metadata,
            KubeObject::Node(n) => &mut n.metadata,
        };
        meta.resource_version = Some(version.to_string());
        o
    }

    fn table_bytes(spec: &TableSpec) -> Vec<u8> {
        build(spec, 7).expect("a compiled spec always builds")
    }

    /// Seeds per randomized test: each runs one random cluster through many edits.
    const SEEDS: u64 = 64;

    /// Snapshots through `update`: equal to `compile_loaded` of the same snapshot, with
    /// the same table spec, and a table serving the same.
    #[test]
    fn update_equals_compile_loaded() {
        for seed in 0..SEEDS {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x1000_0000_01b3) | 1);
            let steps = 1 + rng.below(24) as usize;
            let options = options(&mut rng);
            let mut compiler = Compiler::new(options.clone());
            let mut builder = TableBuilder::new();
            let mut cluster: BTreeMap<ObjectRef, KubeObject> = BTreeMap::new();
            for _ in 0..12 {
                let o = random_object(&mut rng);
                cluster.insert(o.object_ref(), o);
            }
            for step in 0..steps {
                for _ in 0..1 + rng.below(3) {
                    if rng.chance(25) && !cluster.is_empty() {
                        let k = cluster.keys().nth(rng.below(cluster.len() as u64) as usize).cloned().unwrap();
                        cluster.remove(&k);
                    } else {
                        let o = random_object(&mut rng);
                        cluster.insert(o.object_ref(), o);
                    }
                }
                let mut objects: Vec<KubeObject> = cluster.values().cloned().collect();
                if rng.chance(30) && !objects.is_empty() {
                    let i = rng.below(objects.len() as u64) as usize;
                    objects.swap(0, i);
                }
                if rng.chance(15) {
                    objects.push(random_object(&mut rng)); // maybe a later duplicate
                }
                let locations = (0..objects.len())
                    .map(|i| DocumentLocation { path: "m.yaml".into(), document: i + 1, line: 3 * i + 1, item: None })
                    .collect();
                let loaded = Loaded { objects, locations, errors: Vec::new() };
                let expected = crate::compile_loaded(&loaded, &options);
                let got = compiler.update(&loaded).clone();
                assert_eq!(&got, &expected, "seed {seed} step {step}");
                assert_eq!(compiler.table_spec(), &expected.to_table_spec(), "seed {seed} step {step}");
                let bytes = builder.build(compiler.table_spec(), 7).unwrap().to_vec();
                let content = |b: Vec<u8>| torii_table::Table::new(b).unwrap().content();
                assert!(content(bytes) == content(table_bytes(&expected.to_table_spec())), "seed {seed} step {step}");
            }
        }
    }

    /// Watch events through `apply` (with resourceVersions, some events repeated): the
    /// front doors, warnings and table equal those of `compile` over the objects held;
    /// the errors are the same lines, in object order.
    #[test]
    fn apply_equals_compile() {
        let mut patched = 0;
        for seed in 0..SEEDS {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ seed.wrapping_mul(0x1000_0000_01b3) | 1);
            let steps = 1 + rng.below(32) as usize;
            let options = options(&mut rng);
            let mut compiler = Compiler::new(options.clone());
            let mut cluster: BTreeMap<ObjectRef, KubeObject> = BTreeMap::new();
            let mut version = 0;
            // A builder fed the compiler's promises, on some steps only (a publisher
            // that skipped some versions), and the spec it built last.
            let mut builder = torii_table::TableBuilder::new();
            let mut built: Option<(u64, TableSpec)> = None;
            for step in 0..steps {
                let mut upserts = Vec::new();
                let mut deletes = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    if rng.chance(20) && !cluster.is_empty() {
                        let k = cluster.keys().nth(rng.below(cluster.len() as u64) as usize).cloned().unwrap();
                        cluster.remove(&k);
                        deletes.push(k);
                    } else if rng.chance(15) && !cluster.is_empty() {
                        // The same object again (same resourceVersion): skipped.
                        let o = cluster.values().nth(rng.below(cluster.len() as u64) as usize).cloned().unwrap();
                        upserts.push(o);
                    } else {
                        version += 1;
                        let o = with_version(random_object(&mut rng), version);
                        cluster.insert(o.object_ref(), o.clone());
                        deletes.retain(|d| *d != o.object_ref());
                        upserts.push(o);
                    }
                }
                let mut changes: Vec<Change<'_>> = upserts.iter().map(Change::Upsert).collect();
                changes.extend(deletes.into_iter().map(Change::Delete));
                // Deletes of objects upserted in the same batch must come after them.
                let got = compiler.apply(changes).clone();
                let (objects, rejected) = Objects::from_kube(cluster.values());
                let expected = super::super::compile(&objects, &options);
                assert_eq!(&got.frontends, &expected.frontends, "seed {seed} step {step}");
                assert_eq!(&got.warnings, &expected.warnings, "seed {seed} step {step}");
                let mut model_errors: Vec<String> =
                    rejected.iter().map(|r| format!("{}; {} skipped", r.error, r.skipped.as_str())).collect();
                model_errors.extend(expected.errors.iter().cloned());
                assert_eq!(&got.errors, &model_errors, "seed {seed} step {step}");
                assert_eq!(compiler.table_spec(), &expected.to_table_spec(), "seed {seed} step {step}");
                if rng.chance(70) {
                    let spec = compiler.table_spec();
                    let touched = built.as_ref().and_then(|(v, _)| compiler.touched_since(*v));
                    if let (Some((_, before)), Some(t)) = (&built, &touched) {
                        // The promise: the services of every other name are unchanged, in order.
                        let others = |x: &TableSpec| {
                            x.services.iter().filter(|s| !t.contains(s.name.as_str())).cloned().collect::<Vec<_>>()
                        };
                        assert_eq!(others(before), others(spec), "seed {seed} step {step}");
                    }
                    let accepts = touched.as_ref().map(|t| move |n: &str| t.contains(n));
                    let accepts = accepts.as_ref().map(|f| f as &dyn Fn(&str) -> bool);
                    let v = compiler.table_version();
                    if let Ok(bytes) = builder.build_versioned(spec, step as u64 + 1, Some((v, accepts))) {
                        let got = torii_table::Table::new(bytes.to_vec()).unwrap().content();
                        let fresh = torii_table::Table::new(torii_table::build(spec, 1).unwrap()).unwrap().content();
                        assert_eq!(got, fresh, "seed {seed} step {step}");
                        built = Some((v, spec.clone()));
                    } else {
                        built = None;
                    }
                }
            }
            patched += compiler.stats().updates - compiler.stats().full_rebuilds;
        }
        assert!(patched > SEEDS * 4, "the patch path ran {patched} times only");
    }

    #[test]
    fn one_endpoint_change_recompiles_one_service() {
        let mut rng = Rng(42);
        let mut compiler = Compiler::new(CompileOptions { node_name: "gw".into(), ..Default::default() });
        let mut objects = Vec::new();
        for i in 0..100 {
            let mut s = service(&mut rng, "a", i);
            s["spec"] = json!({"clusterIP": format!("10.96.1.{i}"), "externalIPs": [format!("192.0.3.{i}")],
                               "ports": [{"name": "p0", "port": 80}]});
            s["metadata"] = json!({"name": format!("s{i}"), "namespace": "a", "resourceVersion": "1"});
            s["status"] = json!({});
            objects.push(object(s));
            let mut e = slice(&mut rng, "a", i, 0);
            e["metadata"]["resourceVersion"] = json!("1");
            e["addressType"] = json!("IPv4");
            e["endpoints"] = json!([{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]);
            objects.push(object(e));
        }
        compiler.apply(objects.iter().map(Change::Upsert));
        let before = compiler.stats();
        assert_eq!(before.full_rebuilds, 1);
        assert_eq!(compiler.compiled().frontends.len(), 100);
        // Resending everything unchanged costs nothing.
        compiler.apply(objects.iter().map(Change::Upsert));
        assert_eq!(
            CompilerStats { updates: before.updates, ..compiler.stats() },
            before,
            "unchanged resourceVersions are skipped"
        );
        // One endpoint of one slice changes.
        let KubeObject::EndpointSlice(mut e) = objects[7].clone() else { panic!() };
        e.endpoints.as_mut().unwrap()[1].addresses = vec!["10.0.0.9".into()];
        e.metadata.resource_version = Some("2".into());
        let changed = KubeObject::EndpointSlice(e);
        let c = compiler.apply([Change::Upsert(&changed)]);
        let f = c.frontends.iter().find(|f| f.service == "a/s3").unwrap();
        assert_eq!(f.backends.iter().map(|b| b.ip.to_string()).collect::<Vec<_>>(), ["10.0.0.1", "10.0.0.9"]);
        let after = compiler.stats();
        assert_eq!((after.full_rebuilds, after.drafts - before.drafts, after.validated - before.validated), (1, 1, 1));
        let (objects, _) =
            Objects::from_kube(objects.iter().filter(|o| o.object_ref() != changed.object_ref()).chain([&changed]));
        let expected = super::super::compile(&objects, compiler.options());
        assert_eq!(compiler.compiled(), &expected);
        assert_eq!(compiler.table_spec(), &expected.to_table_spec());
    }
}
