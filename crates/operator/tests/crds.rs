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
    let file = std::env::temp_dir().join(format!("hangar-hra-{}.yaml", std::process::id()));
    std::fs::write(&file, hra).unwrap();
    let out = cluster
        .kubectl()
        .args(["apply", "--server-side", "-n", ns.name(), "-f"])
        .arg(&file)
        .output()
        .unwrap();
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
