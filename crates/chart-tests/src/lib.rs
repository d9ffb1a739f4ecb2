//! Rendering Hangar's Helm chart (`deploy/helm/hangar`) for tests.
//!
//! The chart is tested the way users meet it: `helm lint`, `helm template` with the values users
//! set, the rendered objects sent to a real kube-apiserver, and the chart's RBAC checked with
//! `kubectl auth can-i` as its ServiceAccounts. This crate holds the helpers and the one list of
//! permissions the controllers need ([`CONTROLLER_NEEDS`]); the tests are in `tests/`. `helm` is
//! built on first use ([`hangar_testkit::Helm::ensure`]).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use hangar_testkit::{Helm, KUBERNETES_VERSION, TestCluster};
use serde::Deserialize as _;
use serde_yaml::Value;

/// The release name every test renders with.
pub const RELEASE: &str = "hangar";

/// One permission: API group, resource (with subresource), verb.
pub type Permission = (&'static str, &'static str, &'static str);

/// What the Runner controller's metadata watch of credentials Secrets (`hangar run
/// --watch-credential-secrets`, on unless the chart runs cluster-wide) adds to
/// [`CONTROLLER_NEEDS`]: granted only in single-namespace mode, where it reaches the watched
/// namespace's Secrets alone. Cluster-wide, a changed credentials Secret is picked up by the
/// next GET instead (at most `credentials::RECHECK_AFTER` later).
pub const CONTROLLER_SECRET_WATCH_NEEDS: &[Permission] =
    &[("", "secrets", "list"), ("", "secrets", "watch")];

/// [`CONTROLLER_NEEDS`] plus [`CONTROLLER_SECRET_WATCH_NEEDS`]: the controller's rights in the
/// watched namespace with `scope.singleNamespace`.
pub fn single_namespace_controller_needs() -> Vec<Permission> {
    [CONTROLLER_NEEDS, CONTROLLER_SECRET_WATCH_NEEDS].concat()
}

/// What the controllers of `hangar run` call, from crates/operator/src (controllers/*.rs,
/// manager.rs) and crates/runtime/src (context.rs, watch.rs): the chart must grant each of
/// these and nothing else. A new API call in a controller adds a row here and a rule in
/// templates/rbac.yaml.
pub const CONTROLLER_NEEDS: &[Permission] = &[
    // RunnerReplicaSets create Runners and patch their annotations; Runners are deleted when
    // their pod is gone or unregistered; every controller reads them from a watch.
    ("actions.summerwind.dev", "runners", "get"),
    ("actions.summerwind.dev", "runners", "list"),
    ("actions.summerwind.dev", "runners", "watch"),
    ("actions.summerwind.dev", "runners", "create"),
    ("actions.summerwind.dev", "runners", "patch"),
    ("actions.summerwind.dev", "runners", "delete"),
    // RunnerDeployments server-side apply their current set, scale old ones to 0, delete them.
    ("actions.summerwind.dev", "runnerreplicasets", "get"),
    ("actions.summerwind.dev", "runnerreplicasets", "list"),
    ("actions.summerwind.dev", "runnerreplicasets", "watch"),
    ("actions.summerwind.dev", "runnerreplicasets", "create"),
    ("actions.summerwind.dev", "runnerreplicasets", "patch"),
    ("actions.summerwind.dev", "runnerreplicasets", "delete"),
    // The autoscaler reads and scales its targets.
    ("actions.summerwind.dev", "runnerdeployments", "get"),
    ("actions.summerwind.dev", "runnerdeployments", "list"),
    ("actions.summerwind.dev", "runnerdeployments", "watch"),
    ("actions.summerwind.dev", "runnerdeployments", "patch"),
    ("actions.summerwind.dev", "runnersets", "get"),
    ("actions.summerwind.dev", "runnersets", "list"),
    ("actions.summerwind.dev", "runnersets", "watch"),
    ("actions.summerwind.dev", "runnersets", "patch"),
    // ... and expires capacity reservations in its own spec (the pull recovery adds them).
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "get",
    ),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "list",
    ),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "watch",
    ),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "patch",
    ),
    // Status by merge patch.
    ("actions.summerwind.dev", "runners/status", "patch"),
    (
        "actions.summerwind.dev",
        "runnerreplicasets/status",
        "patch",
    ),
    (
        "actions.summerwind.dev",
        "runnerdeployments/status",
        "patch",
    ),
    ("actions.summerwind.dev", "runnersets/status", "patch"),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers/status",
        "patch",
    ),
    // blockOwnerDeletion on children (OwnerReferencesPermissionEnforcement).
    ("actions.summerwind.dev", "runners/finalizers", "update"),
    (
        "actions.summerwind.dev",
        "runnerreplicasets/finalizers",
        "update",
    ),
    (
        "actions.summerwind.dev",
        "runnerdeployments/finalizers",
        "update",
    ),
    ("actions.summerwind.dev", "runnersets/finalizers", "update"),
    // Runner pods.
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "create"),
    ("", "pods", "patch"),
    ("", "pods", "delete"),
    // Registration Secrets (server-side apply) and githubAPICredentialsFrom Secrets (GET by the
    // name a resource gives). No list or watch: that would read every Secret of the cluster
    // (see CONTROLLER_SECRET_WATCH_NEEDS).
    ("", "secrets", "get"),
    ("", "secrets", "create"),
    ("", "secrets", "patch"),
    // RunnerSet runners (one StatefulSet each).
    ("apps", "statefulsets", "get"),
    ("apps", "statefulsets", "list"),
    ("apps", "statefulsets", "watch"),
    ("apps", "statefulsets", "create"),
    ("apps", "statefulsets", "patch"),
    ("apps", "statefulsets", "delete"),
    // RunnerSet volume reuse: claims of volumeClaimTemplates from a watch, labelled with their
    // StatefulSet if created without it, deleted once it is gone.
    ("", "persistentvolumeclaims", "list"),
    ("", "persistentvolumeclaims", "watch"),
    ("", "persistentvolumeclaims", "patch"),
    ("", "persistentvolumeclaims", "delete"),
    // A deleted RunnerSet reads its namespace (is it terminating?).
    ("", "namespaces", "get"),
    // kube-runtime's event recorder.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
];

/// What the controller calls on cluster-scoped objects, granted by a ClusterRole of its own in
/// every mode, `scope.singleNamespace` included:
/// - the RunnerSet controller's volume reuse (controllers/runner_set/volumes.rs) on
///   PersistentVolumes: a watch of the volumes labelled `pending-cleanup`, and merge patches
///   (that label; removing `spec.claimRef`);
/// - runner health (the manager's node watch): a watch of Nodes, for their Ready condition.
pub const CONTROLLER_CLUSTER_NEEDS: &[Permission] = &[
    ("", "persistentvolumes", "list"),
    ("", "persistentvolumes", "watch"),
    ("", "persistentvolumes", "patch"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
];

/// What `hangar webhook-server` calls (webhook_server.rs): reflectors over autoscalers and their
/// targets, merge patches of capacity reservations into autoscalers, and Warning events about
/// autoscalers a delivery matches ambiguously.
pub const WEBHOOK_SERVER_NEEDS: &[Permission] = &[
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "get",
    ),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "list",
    ),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "watch",
    ),
    (
        "actions.summerwind.dev",
        "horizontalrunnerautoscalers",
        "patch",
    ),
    ("actions.summerwind.dev", "runnerdeployments", "get"),
    ("actions.summerwind.dev", "runnerdeployments", "list"),
    ("actions.summerwind.dev", "runnerdeployments", "watch"),
    ("actions.summerwind.dev", "runnersets", "get"),
    ("actions.summerwind.dev", "runnersets", "list"),
    ("actions.summerwind.dev", "runnersets", "watch"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
];

/// What the admission webhooks (`hangar run --admission-addr`; admission/rotation.rs and
/// admission/configurations.rs) call beyond [`CONTROLLER_NEEDS`], for release [`RELEASE`] in
/// `namespace`, in the form [`granted`] returns (`resource=name` where a rule names its
/// objects): cluster-wide, get and patch of the chart's two webhook configurations (caBundle)
/// and get of namespaces (the runner-pod deletion guard holds pods of terminating ones); in
/// the release namespace, the certificate Secret, created once and then read, watched by
/// name and replaced.
pub fn admission_needs(namespace: &str) -> AdmissionNeeds {
    let triple = |g: &str, r: String, v: &str| (g.to_owned(), r, v.to_owned());
    let group = "admissionregistration.k8s.io";
    let mut cluster = Vec::new();
    for (resource, kind) in [
        ("mutatingwebhookconfigurations", "mutating"),
        ("validatingwebhookconfigurations", "validating"),
    ] {
        let name = format!("{RELEASE}-{namespace}-{kind}-webhook-configuration");
        for verb in ["get", "patch"] {
            cluster.push(triple(group, format!("{resource}={name}"), verb));
        }
    }
    cluster.push(triple("", "namespaces".into(), "get"));
    let tls = format!("secrets={RELEASE}-webhook-tls");
    let mut release_namespace = vec![triple("", "secrets".into(), "create")];
    for verb in ["get", "list", "watch", "update"] {
        release_namespace.push(triple("", tls.clone(), verb));
    }
    cluster.sort();
    release_namespace.sort();
    AdmissionNeeds {
        cluster,
        release_namespace,
    }
}

/// See [`admission_needs`]: (group, resource or `resource=name`, verb), sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionNeeds {
    /// Granted by a ClusterRole (the configurations are cluster-scoped).
    pub cluster: Vec<(String, String, String)>,
    /// Granted by a Role in the release namespace.
    pub release_namespace: Vec<(String, String, String)>,
}

/// The chart's directory in the repository.
pub fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/helm/hangar")
        .canonicalize()
        .expect("deploy/helm/hangar exists")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The `helm` binary, built into the cache on first use; panics with the build error.
pub fn helm() -> Helm {
    Helm::ensure().unwrap_or_else(|e| panic!("helm is not available: {e}"))
}

/// `helm template` of the chart into `namespace` with `--set` values; the YAML stream.
pub fn render(namespace: &str, sets: &[&str]) -> String {
    render_with(namespace, sets, &[])
}

/// [`render`] with extra `helm template` arguments (e.g. `--include-crds`).
pub fn render_with(namespace: &str, sets: &[&str], extra: &[&str]) -> String {
    let mut cmd = helm().command();
    cmd.args(["template", RELEASE])
        .arg(chart_dir())
        .args([
            "--namespace",
            namespace,
            "--kube-version",
            KUBERNETES_VERSION,
        ])
        .args(extra);
    for set in sets {
        cmd.args(["--set", set]);
    }
    output(&mut cmd)
}

/// The objects of a YAML stream (empty documents dropped).
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `kind/name` of every object, in order.
pub fn kinds_and_names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                str_at(o, &["kind"]),
                str_at(o, &["metadata", "name"])
            )
        })
        .collect()
}

/// The string at `path` in `v`, or "" when absent.
pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The objects of kind `kind`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| str_at(o, &["kind"]) == kind)
        .collect()
}

/// The (group, resource, verb) triples a Role's or ClusterRole's rules grant, expanded; rules
/// limited by resourceNames are returned separately as `resource=name`.
pub fn granted(role: &Value) -> Vec<(String, String, String)> {
    let list = |r: &Value, k: &str| -> Vec<String> {
        r.get(k)
            .and_then(Value::as_sequence)
            .map(|s| {
                s.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for rule in role
        .get("rules")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        let names = list(rule, "resourceNames");
        for group in list(rule, "apiGroups") {
            for resource in list(rule, "resources") {
                for verb in list(rule, "verbs") {
                    if names.is_empty() {
                        out.push((group.clone(), resource.clone(), verb.clone()));
                    } else {
                        for name in &names {
                            out.push((group.clone(), format!("{resource}={name}"), verb.clone()));
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// Runs `cmd` and returns its stdout; panics with stderr when it fails.
pub fn output(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd` with `input` on stdin; (success, stdout + stderr).
pub fn run_with_stdin(cmd: &mut Command, input: &str) -> (bool, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_owned();
    // Write from a thread: a large stream would otherwise deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("child runs");
    writer
        .join()
        .expect("writer thread")
        .expect("stdin written");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Cluster-scoped objects a test applied, deleted when it ends (also on panic).
#[derive(Debug)]
pub struct ClusterScoped {
    kubeconfig: PathBuf,
    /// `kind/name` of each (kind in lower case, as `kubectl delete` takes it).
    pub names: Vec<String>,
}

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        if self.names.is_empty() {
            return;
        }
        let _ = TestCluster::get()
            .kubectl()
            .env("KUBECONFIG", &self.kubeconfig)
            .args(["delete", "--ignore-not-found", "--wait=false"])
            .args(&self.names)
            .output();
    }
}

/// Applies the chart's ServiceAccounts and RBAC objects (only those) for real.
pub fn apply_rbac(cluster: &TestCluster, yaml: &str) -> ClusterScoped {
    let rbac: Vec<_> = documents(yaml)
        .into_iter()
        .filter(|o| {
            matches!(
                str_at(o, &["kind"]),
                "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
            )
        })
        .collect();
    let names = rbac
        .iter()
        .filter(|o| str_at(o, &["kind"]).starts_with("Cluster"))
        .map(|o| {
            format!(
                "{}/{}",
                str_at(o, &["kind"]).to_lowercase(),
                str_at(o, &["metadata", "name"])
            )
        })
        .collect();
    let guard = ClusterScoped {
        kubeconfig: cluster.kubeconfig().to_owned(),
        names,
    };
    let stream: String = rbac
        .iter()
        .map(|o| format!("---\n{}", serde_yaml::to_string(o).unwrap()))
        .collect();
    let (ok, said) = run_with_stdin(
        cluster.kubectl().args([
            "apply",
            "--server-side",
            "--field-manager=hangar-chart-tests",
            "-f",
            "-",
        ]),
        &stream,
    );
    assert!(ok, "applying the chart's RBAC failed:\n{said}");
    guard
}
