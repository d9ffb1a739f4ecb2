//! The CRDs against a real kube-apiserver: ARC manifests apply unchanged, invalid ones are
//! refused with a message a user can act on, and `kubectl` documents and displays the kinds.

use std::path::{Path, PathBuf};
use std::process::Output;

use hangar_testkit::{TestCluster, TestNamespace, crds};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn ready_namespace(prefix: &str) -> (&'static TestCluster, TestNamespace) {
    let cluster = TestCluster::get();
    crds::install(&cluster.client().await).await;
    let ns = TestNamespace::create(cluster, prefix).await;
    (cluster, ns)
}

#[tokio::test]
async fn every_example_applies_unchanged_with_server_side_apply() {
    let (cluster, ns) = ready_namespace("examples").await;
    let files = yaml_files(&examples_dir());
    assert!(
        files.len() >= 6,
        "expected the seed and reference examples, found {files:?}"
    );
    for file in files {
        let out = cluster
            .kubectl()
            .args(["apply", "--server-side", "-n", ns.name(), "-f"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} was rejected:\n{}",
            file.display(),
            text(&out)
        );
    }
}

#[tokio::test]
async fn invalid_manifests_are_rejected_with_the_intended_message() {
    let (cluster, ns) = ready_namespace("invalid").await;
    let files = yaml_files(&examples_dir().join("invalid"));
    assert!(
        files.len() >= 7,
        "expected one invalid example per rule, found {files:?}"
    );
    for file in files {
        let content = std::fs::read_to_string(&file).unwrap();
        let expected = content
            .lines()
            .find_map(|l| l.strip_prefix("# expect:"))
            .unwrap_or_else(|| panic!("{} lacks a `# expect:` line", file.display()))
            .trim();
        let out = cluster
            .kubectl()
            .args(["apply", "--server-side", "-n", ns.name(), "-f"])
            .arg(&file)
            .output()
            .unwrap();
        let said = text(&out);
        assert!(
            !out.status.success(),
            "{} was accepted:\n{said}",
            file.display()
        );
        assert!(
            said.contains(expected),
            "{}: wanted {expected:?} in:\n{said}",
            file.display()
        );
    }
}

#[tokio::test]
async fn kubectl_explain_documents_the_runner_template() {
    let (cluster, _ns) = ready_namespace("explain").await;
    let out = cluster
        .kubectl()
        .args(["explain", "runnerdeployment.spec.template.spec"])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    for field in [
        "repository",
        "organization",
        "enterprise",
        "labels",
        "ephemeral",
        "dockerdWithinRunnerContainer",
        "containers",
    ] {
        assert!(said.contains(field), "explain lacks {field}:\n{said}");
    }
    // Field docs, not just names: the ephemeral default must be explained.
    let out = cluster
        .kubectl()
        .args(["explain", "runnerdeployment.spec.template.spec.ephemeral"])
        .output()
        .unwrap();
    assert!(text(&out).to_lowercase().contains("true"), "{}", text(&out));
}

#[tokio::test]
async fn hra_short_name_and_printer_columns_work() {
    let (cluster, ns) = ready_namespace("columns").await;
    let hra = "apiVersion: actions.summerwind.dev/v1alpha1\nkind: HorizontalRunnerAutoscaler\nmetadata:\n  name: columns\nspec:\n  scaleTargetRef:\n    name: some-deployment\n  minReplicas: 1\n  maxReplicas: 7\n";
    let mut apply = cluster
        .kubectl()
        .args(["apply", "--server-side", "-n", ns.name(), "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut apply.stdin.take().unwrap(), hra.as_bytes()).unwrap();
    let out = apply.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = cluster
        .kubectl()
        .args(["get", "hra", "-n", ns.name()])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let header = said.lines().next().unwrap_or_default();
    for column in ["NAME", "MIN", "MAX", "DESIRED", "AGE"] {
        assert!(header.contains(column), "missing column {column}: {said}");
    }
    assert!(said.contains("columns") && said.contains('7'), "{said}");
}

/// Creates `doc` through the typed API and returns the spec the server stored, as JSON.
async fn round_trip<K>(
    client: &kube::Client,
    ns: &str,
    doc: serde_json::Value,
) -> (serde_json::Value, serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(doc).expect("example parses into the Rust type");
    let api: kube::Api<K> = kube::Api::namespaced(client.clone(), ns);
    let created = api
        .create(&Default::default(), &typed)
        .await
        .expect("create");
    let sent = serde_json::to_value(&typed).unwrap()["spec"].clone();
    let stored = serde_json::to_value(&created).unwrap()["spec"].clone();
    (sent, stored)
}

#[tokio::test]
async fn typed_objects_round_trip_without_pruning() {
    use hangar_api::{
        HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet,
    };
    let (cluster, ns) = ready_namespace("roundtrip").await;
    let client = cluster.client().await;
    let mut checked = 0;
    for file in yaml_files(&examples_dir()) {
        let content = std::fs::read_to_string(&file).unwrap();
        for (i, doc) in serde_yaml::Deserializer::from_str(&content).enumerate() {
            let mut value: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            if value.is_null() {
                continue;
            }
            // Unique names: several example files reuse ARC's sample names.
            let name = format!("rt-{checked}-{i}");
            value["metadata"] = serde_json::json!({ "name": name });
            let kind = value["kind"].as_str().unwrap_or_default().to_owned();
            let (sent, stored) = match kind.as_str() {
                "Runner" => round_trip::<Runner>(&client, ns.name(), value).await,
                "RunnerReplicaSet" => {
                    round_trip::<RunnerReplicaSet>(&client, ns.name(), value).await
                }
                "RunnerDeployment" => {
                    round_trip::<RunnerDeployment>(&client, ns.name(), value).await
                }
                "RunnerSet" => round_trip::<RunnerSet>(&client, ns.name(), value).await,
                "HorizontalRunnerAutoscaler" => {
                    round_trip::<HorizontalRunnerAutoscaler>(&client, ns.name(), value).await
                }
                other => panic!("{}: unexpected kind {other}", file.display()),
            };
            assert_eq!(
                sent,
                stored,
                "{} ({kind}): the server pruned or changed fields",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} objects checked");
}

#[tokio::test]
async fn status_subresource_is_separate_from_spec() {
    use hangar_api::RunnerDeployment;
    use kube::api::{Patch, PatchParams};
    let (cluster, ns) = ready_namespace("status").await;
    let client = cluster.client().await;
    let rd: RunnerDeployment = serde_yaml::from_str(
        "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\nmetadata:\n  name: st\nspec:\n  replicas: 2\n  template:\n    spec:\n      repository: octo/app\n",
    )
    .unwrap();
    let api: kube::Api<RunnerDeployment> = ns.api(client);
    api.create(&Default::default(), &rd).await.unwrap();
    let status = serde_json::json!({ "status": { "replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "desiredReplicas": 2, "updatedReplicas": 2 } });
    api.patch_status("st", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    // A status written through the main resource is ignored by the server.
    let sneaky = serde_json::json!({ "status": { "replicas": 99 } });
    api.patch("st", &PatchParams::default(), &Patch::Merge(&sneaky))
        .await
        .unwrap();
    let got = api.get("st").await.unwrap();
    let status = got.status.expect("status stored");
    assert_eq!((status.replicas, status.ready_replicas), (Some(2), Some(1)));
    let out = cluster
        .kubectl()
        .args(["get", "runnerdeployment", "st", "-n", ns.name()])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(
        said.lines().next().unwrap_or_default().contains("DESIRED"),
        "{said}"
    );
}
