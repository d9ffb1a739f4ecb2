//! A container's environment, resolved as the kubelet does before it creates the container.
//!
//! Order and precedence: `envFrom` sources first (ConfigMaps and Secrets, with their prefix;
//! keys that are not valid variable names are skipped), then `env` entries in order, a later
//! definition replacing an earlier one. `env` values may refer to earlier variables as
//! `$(NAME)` (`$$` escapes a `$`; unknown references stay as written). `valueFrom` reads
//! ConfigMap and Secret keys, pod fields (`fieldRef`) and the container's resources
//! (`resourceFieldRef`). A missing object or key that is not `optional` is an error — the
//! container waits with `CreateContainerConfigError` and is retried.
//!
//! Not simulated: service link variables (`KUBERNETES_SERVICE_HOST`, ...) and `fileKeyRef`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

/// Where ConfigMaps and Secrets come from.
#[async_trait]
pub trait ObjectSource: Send + Sync {
    /// The data of ConfigMap `namespace/name`; `Ok(None)` if it does not exist.
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String>;

    /// The (decoded) data of Secret `namespace/name`; `Ok(None)` if it does not exist.
    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String>;
}

/// Reads ConfigMaps and Secrets from the API server, one GET each.
#[derive(Clone)]
pub struct ApiObjects(pub Client);

impl std::fmt::Debug for ApiObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiObjects")
    }
}

#[async_trait]
impl ObjectSource for ApiObjects {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        let api: Api<ConfigMap> = Api::namespaced(self.0.clone(), namespace);
        let cm = api.get_opt(name).await.map_err(|e| e.to_string())?;
        Ok(cm.as_ref().map(config_map_data))
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        let api: Api<Secret> = Api::namespaced(self.0.clone(), namespace);
        let secret = api.get_opt(name).await.map_err(|e| e.to_string())?;
        Ok(secret.as_ref().map(secret_data))
    }
}

/// Reads ConfigMaps and Secrets as a kubelet does by default
/// (`configMapAndSecretChangeDetectionStrategy: Watch`): from watches, so that a container
/// start, and every retry of one that waits with `CreateContainerConfigError`, costs the API
/// server nothing. (Read with a GET each, a thousand pods retrying every two seconds sent the
/// API server 400 requests a second, which no real node sends.) An object the watches do not
/// show (yet) is read with a GET, as a kubelet waits for its watch of a new object to sync.
pub struct WatchedObjects {
    api: ApiObjects,
    secrets: Store<Secret>,
    config_maps: Store<ConfigMap>,
    watches: [tokio::task::AbortHandle; 2],
}

impl std::fmt::Debug for WatchedObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedObjects")
            .field("secrets", &self.secrets.len())
            .field("config_maps", &self.config_maps.len())
            .finish()
    }
}

impl WatchedObjects {
    /// Starts watching every namespace's Secrets and ConfigMaps (stopped when dropped).
    pub fn start(client: Client) -> Self {
        fn watch<K>(api: Api<K>) -> (Store<K>, tokio::task::AbortHandle)
        where
            K: kube::Resource<DynamicType = ()>
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned
                + Send
                + Sync
                + 'static,
        {
            let (store, writer) = reflector::store();
            let stream = reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(|_| async {});
            (store, tokio::spawn(stream).abort_handle())
        }
        let (secrets, secret_watch) = watch(Api::<Secret>::all(client.clone()));
        let (config_maps, config_map_watch) = watch(Api::<ConfigMap>::all(client.clone()));
        Self {
            api: ApiObjects(client),
            secrets,
            config_maps,
            watches: [secret_watch, config_map_watch],
        }
    }
}

impl Drop for WatchedObjects {
    fn drop(&mut self) {
        for watch in &self.watches {
            watch.abort();
        }
    }
}

#[async_trait]
impl ObjectSource for WatchedObjects {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        match self
            .config_maps
            .get(&ObjectRef::new(name).within(namespace))
        {
            Some(cm) => Ok(Some(config_map_data(&cm))),
            None => self.api.config_map(namespace, name).await,
        }
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        match self.secrets.get(&ObjectRef::new(name).within(namespace)) {
            Some(secret) => Ok(Some(secret_data(&secret))),
            None => self.api.secret(namespace, name).await,
        }
    }
}

/// A ConfigMap's keys and values (binary ones read as UTF-8, lossily).
fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, String> {
    let mut data = cm.data.clone().unwrap_or_default();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    data
}

/// A Secret's decoded keys and values.
fn secret_data(secret: &Secret) -> BTreeMap<String, String> {
    let mut data: BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    data.extend(secret.string_data.clone().unwrap_or_default());
    data
}

/// Pod facts `fieldRef` can read that are not in the pod object yet.
#[derive(Clone, Debug)]
pub struct Addresses<'a> {
    /// The node's name.
    pub node_name: &'a str,
    /// The node's IP.
    pub host_ip: &'a str,
    /// The pod's IP.
    pub pod_ip: &'a str,
}

/// Resolves `container`'s environment. The error is the kubelet's message.
pub async fn resolve(
    pod: &Pod,
    container: &Container,
    addresses: &Addresses<'_>,
    objects: &dyn ObjectSource,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, name: String, value: String| {
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    };

    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or_default();
        let (data, kind, name, optional) = if let Some(r) = &source.config_map_ref {
            let data = objects.config_map(namespace, &r.name).await?;
            (data, "configmap", &r.name, r.optional == Some(true))
        } else if let Some(r) = &source.secret_ref {
            let data = objects.secret(namespace, &r.name).await?;
            (data, "secret", &r.name, r.optional == Some(true))
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (k, v) in data {
                    let var = format!("{prefix}{k}");
                    if is_env_var_name(&var) {
                        set(&mut env, var, v);
                    }
                }
            }
            None if optional => {}
            None => return Err(format!("{kind} \"{name}\" not found")),
        }
    }

    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (_, Some(from)) => {
                let value = if let Some(r) = &from.config_map_key_ref {
                    let data = objects.config_map(namespace, &r.name).await?;
                    key_of(data, "configmap", namespace, &r.name, &r.key, r.optional)?
                } else if let Some(r) = &from.secret_key_ref {
                    let data = objects.secret(namespace, &r.name).await?;
                    key_of(data, "secret", namespace, &r.name, &r.key, r.optional)?
                } else if let Some(r) = &from.field_ref {
                    Some(field(pod, &r.field_path, addresses)?)
                } else if let Some(r) = &from.resource_field_ref {
                    Some(resource_field(container, &r.resource)?)
                } else {
                    None
                };
                match value {
                    Some(v) => v,
                    // An optional reference that is missing leaves the variable unset.
                    None => continue,
                }
            }
            (Some(value), None) => {
                let lookup = |name: &str| {
                    env.iter()
                        .rev()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                };
                expand(value, lookup)
            }
            (None, None) => String::new(),
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

fn key_of(
    data: Option<BTreeMap<String, String>>,
    kind: &str,
    namespace: &str,
    name: &str,
    key: &str,
    optional: Option<bool>,
) -> Result<Option<String>, String> {
    let optional = optional == Some(true);
    match data {
        None if optional => Ok(None),
        None => Err(format!("{kind} \"{name}\" not found")),
        Some(mut data) => match data.remove(key) {
            Some(v) => Ok(Some(v)),
            None if optional => Ok(None),
            None => {
                let kind = if kind == "secret" {
                    "Secret"
                } else {
                    "ConfigMap"
                };
                Err(format!(
                    "couldn't find key {key} in {kind} {namespace}/{name}"
                ))
            }
        },
    }
}

fn field(pod: &Pod, path: &str, addresses: &Addresses<'_>) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_owned)
    };
    let value = match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(addresses.node_name.to_owned()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.hostIP" | "status.hostIPs" => Some(addresses.host_ip.to_owned()),
        "status.podIP" | "status.podIPs" => Some(addresses.pod_ip.to_owned()),
        _ => {
            if let Some(key) = subscript("metadata.labels['") {
                meta.labels.as_ref().and_then(|l| l.get(&key).cloned())
            } else if let Some(key) = subscript("metadata.annotations['") {
                meta.annotations.as_ref().and_then(|a| a.get(&key).cloned())
            } else {
                return Err(format!("unsupported fieldPath: {path}"));
            }
        }
    };
    Ok(value.unwrap_or_default())
}

fn resource_field(container: &Container, resource: &str) -> Result<String, String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource: {resource}"))?;
    let resources = container.resources.as_ref();
    let list = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("unsupported container resource: {resource}")),
    };
    let quantity = list.and_then(|l| l.get(name)).map(|q| q.0.clone());
    // Without a limit the kubelet reports the node's allocatable amount; the simulator has
    // no real machine behind it, so an unset resource reads as 0.
    Ok(quantity.unwrap_or_else(|| "0".to_owned()))
}

/// Whether `name` is a valid environment variable name (letters, digits, `_`, `-`, `.`; not
/// starting with a digit).
fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '-' || c == '.')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Expands `$(NAME)` references in `input` with `lookup` (Kubernetes' expansion rules).
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(end) => {
                    let name = &tail[..end];
                    match lookup(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
        ObjectFieldSelector, PodSpec, SecretEnvSource, SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[derive(Default)]
    struct Fake {
        config_maps: BTreeMap<String, BTreeMap<String, String>>,
        secrets: BTreeMap<String, BTreeMap<String, String>>,
        reads: Mutex<u32>,
    }

    #[async_trait]
    impl ObjectSource for Fake {
        async fn config_map(
            &self,
            _: &str,
            name: &str,
        ) -> Result<Option<BTreeMap<String, String>>, String> {
            *self.reads.lock().unwrap() += 1;
            Ok(self.config_maps.get(name).cloned())
        }
        async fn secret(
            &self,
            _: &str,
            name: &str,
        ) -> Result<Option<BTreeMap<String, String>>, String> {
            *self.reads.lock().unwrap() += 1;
            Ok(self.secrets.get(name).cloned())
        }
    }

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn plain(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            value_from: None,
        }
    }

    fn from(name: &str, source: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.to_owned(),
            value: None,
            value_from: Some(source),
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("runner-abc".to_owned()),
                namespace: Some("ci".to_owned()),
                labels: Some(map(&[("app", "runner")])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            ..Pod::default()
        }
    }

    const ADDRESSES: Addresses<'static> = Addresses {
        node_name: "sim-0",
        host_ip: "10.9.0.1",
        pod_ip: "10.10.0.7",
    };

    #[tokio::test]
    async fn resolves_like_the_kubelet() {
        let objects = Fake {
            config_maps: [(
                "settings".to_owned(),
                map(&[("ORG", "acme"), ("bad key", "x")]),
            )]
            .into(),
            secrets: [("token".to_owned(), map(&[("jit", "s3cr3t")]))].into(),
            ..Fake::default()
        };
        let container = Container {
            name: "runner".to_owned(),
            env_from: Some(vec![
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "settings".to_owned(),
                        optional: None,
                    }),
                    prefix: Some("RUNNER_".to_owned()),
                    secret_ref: None,
                },
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: "absent".to_owned(),
                        optional: Some(true),
                    }),
                    ..EnvFromSource::default()
                },
            ]),
            env: Some(vec![
                plain("RUNNER_NAME", "$(POD)"),
                from(
                    "POD",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".to_owned(),
                            api_version: None,
                        }),
                        ..EnvVarSource::default()
                    },
                ),
                plain("RUNNER_NAME", "$(POD)-$(RUNNER_ORG)-$$(POD)"),
                from(
                    "ACTIONS_RUNNER_INPUT_JITCONFIG",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "token".to_owned(),
                            key: "jit".to_owned(),
                            optional: None,
                        }),
                        ..EnvVarSource::default()
                    },
                ),
                from(
                    "OPTIONAL",
                    EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "settings".to_owned(),
                            key: "nope".to_owned(),
                            optional: Some(true),
                        }),
                        ..EnvVarSource::default()
                    },
                ),
                from(
                    "APP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.labels['app']".to_owned(),
                            api_version: None,
                        }),
                        ..EnvVarSource::default()
                    },
                ),
                from(
                    "NODE_IP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "status.hostIP".to_owned(),
                            api_version: None,
                        }),
                        ..EnvVarSource::default()
                    },
                ),
            ]),
            ..Container::default()
        };
        let env = resolve(&pod(), &container, &ADDRESSES, &objects)
            .await
            .unwrap();
        let got: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("RUNNER_ORG", "acme"),
                ("POD", "runner-abc"),
                ("RUNNER_NAME", "runner-abc-acme-$(POD)"),
                ("ACTIONS_RUNNER_INPUT_JITCONFIG", "s3cr3t"),
                ("APP", "runner"),
                ("NODE_IP", "10.9.0.1"),
            ]
        );
    }

    #[tokio::test]
    async fn missing_references_give_the_kubelets_errors() {
        let objects = Fake {
            secrets: [("token".to_owned(), map(&[("a", "b")]))].into(),
            ..Fake::default()
        };
        let secret = |name: &str, key: &str| Container {
            env: Some(vec![from(
                "X",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: name.to_owned(),
                        key: key.to_owned(),
                        optional: None,
                    }),
                    ..EnvVarSource::default()
                },
            )]),
            ..Container::default()
        };
        let err = resolve(&pod(), &secret("gone", "a"), &ADDRESSES, &objects).await;
        assert_eq!(err, Err("secret \"gone\" not found".to_owned()));
        let err = resolve(&pod(), &secret("token", "k"), &ADDRESSES, &objects).await;
        assert_eq!(
            err,
            Err("couldn't find key k in Secret ci/token".to_owned())
        );
    }

    #[tokio::test]
    async fn plain_values_need_no_api_reads() {
        let objects = Fake::default();
        let container = Container {
            env: Some(vec![plain("A", "1")]),
            ..Container::default()
        };
        resolve(&pod(), &container, &ADDRESSES, &objects)
            .await
            .unwrap();
        assert_eq!(*objects.reads.lock().unwrap(), 0);
    }

    #[test]
    fn expansion_follows_the_kubernetes_rules() {
        let lookup = |name: &str| (name == "A").then(|| "x".to_owned());
        for (input, want) in [
            ("$(A)", "x"),
            ("pre-$(A)-post", "pre-x-post"),
            ("$(B)", "$(B)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("cost: 5$", "cost: 5$"),
            ("", ""),
        ] {
            assert_eq!(expand(input, lookup), want, "{input:?}");
        }
    }
}
