//! The `hangar run` flags of the admission server, and starting it from them.

use std::net::SocketAddr;
use std::sync::Arc;

use hangar_github::{ClientRegistry, GitHubApi};

use super::configurations::{
    DEFAULT_MUTATING_NAME, DEFAULT_VALIDATING_NAME, Endpoint, Registration,
};
use super::{Admission, AdmissionConfig};
use crate::context::SystemClock;
use crate::credentials::GitHubClients;
use crate::serve::Limits;
use hangar_runtime::registration::mode::RunnerSetRegistration;

/// Admission webhook flags (flattened into `hangar run`).
#[derive(Debug, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// Serve the admission webhooks (HTTPS, self-managed certificates) on this address, e.g.
    /// 0.0.0.0:9443. Off when unset.
    #[arg(long)]
    pub admission_addr: Option<SocketAddr>,
    /// The apiserver calls the webhooks at this URL base, e.g. https://127.0.0.1:9443 when it
    /// runs on the same host (the local stack). The serving certificate is issued for its host.
    #[arg(long, conflicts_with = "webhook_service_name")]
    pub webhook_url_base: Option<String>,
    /// The apiserver calls the webhooks through this Service (in-cluster).
    #[arg(long)]
    pub webhook_service_name: Option<String>,
    /// Namespace of that Service, and of the certificate Secret.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub webhook_service_namespace: String,
    /// Port of that Service.
    #[arg(long, default_value_t = 443)]
    pub webhook_service_port: i32,
    /// Name of the MutatingWebhookConfiguration whose caBundle Hangar keeps current.
    #[arg(long, default_value = DEFAULT_MUTATING_NAME)]
    pub mutating_webhook_configuration: String,
    /// Name of the ValidatingWebhookConfiguration whose caBundle Hangar keeps current.
    #[arg(long, default_value = DEFAULT_VALIDATING_NAME)]
    pub validating_webhook_configuration: String,
    /// Also create the two webhook configurations when they do not exist (needs RBAC create
    /// on webhook configurations; by default Hangar only patches their caBundle).
    #[arg(long)]
    pub admission_create_configurations: bool,
    /// Secret holding the webhook CA and serving certificate.
    #[arg(long, default_value = super::rotation::DEFAULT_SECRET_NAME)]
    pub webhook_tls_secret: String,
    /// Largest AdmissionReview body accepted, in bytes; a larger one gets 413 before it is read.
    #[arg(long, default_value_t = super::DEFAULT_MAX_BODY_BYTES)]
    pub admission_max_body_bytes: usize,
    /// Connections the admission server serves at once; more are closed.
    #[arg(long, default_value_t = super::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub admission_max_connections: u32,
}

/// Why the admission server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Neither a URL nor a Service was given.
    #[error(
        "--admission-addr needs --webhook-url-base (e.g. https://127.0.0.1:9443) or \
         --webhook-service-name"
    )]
    NoEndpoint,
    /// The address could not be bound.
    #[error("cannot listen on {addr} for admission webhooks: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

impl AdmissionArgs {
    /// How the RunnerSet controller of this process registers its pods: through the pod
    /// webhook when this process serves the admission webhooks (`--admission-addr`), else with
    /// a Secret per StatefulSet.
    pub fn runner_set_registration(&self) -> RunnerSetRegistration {
        match self.admission_addr {
            Some(_) => RunnerSetRegistration::PodWebhook,
            None => RunnerSetRegistration::StatefulSetSecret,
        }
    }

    /// The server's connection and body limits, with the default timeouts.
    pub fn limits(&self) -> Limits {
        Limits::new(
            self.admission_max_connections,
            self.admission_max_body_bytes,
        )
    }

    /// Binds the listener and returns the server to spawn (serving within `limits`, holding
    /// runner pods of terminating namespaces for `retirement_timeout`), or `None` when not
    /// enabled.
    pub async fn start(
        &self,
        client: &kube::Client,
        github: Arc<dyn GitHubApi>,
        registry: Option<Arc<ClientRegistry>>,
        limits: Limits,
        retirement_timeout: std::time::Duration,
    ) -> Result<Option<impl std::future::Future<Output = ()> + Send + 'static>, StartError> {
        let Some(addr) = self.admission_addr else {
            return Ok(None);
        };
        let endpoint = match (&self.webhook_url_base, &self.webhook_service_name) {
            (Some(url), _) => Endpoint::Url(url.clone()),
            (None, Some(name)) => Endpoint::Service {
                namespace: self.webhook_service_namespace.clone(),
                name: name.clone(),
                port: self.webhook_service_port,
            },
            (None, None) => return Err(StartError::NoEndpoint),
        };
        let mut registration = Registration::new(endpoint);
        registration.mutating_name = self.mutating_webhook_configuration.clone();
        registration.validating_name = self.validating_webhook_configuration.clone();
        registration.create_if_absent = self.admission_create_configurations;
        let mut config = AdmissionConfig::new(registration, &self.webhook_service_namespace);
        config.tls_secret = self.webhook_tls_secret.clone();
        config.limits = limits;
        config.retirement_timeout = retirement_timeout;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let admission = Admission::new(
            client.clone(),
            Arc::new(GitHubClients::new(github, registry)),
            Arc::new(SystemClock),
            config,
        );
        tracing::info!(%addr, "serving admission webhooks");
        Ok(Some(async move {
            if let Err(e) = admission.serve(listener, std::future::pending()).await {
                tracing::error!(error = %e, "admission server failed");
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        admission: AdmissionArgs,
    }

    #[test]
    fn runnersets_use_the_pod_webhook_exactly_when_this_process_serves_it() {
        for (args, mode) in [
            (vec![], RunnerSetRegistration::StatefulSetSecret),
            (
                vec!["--webhook-service-name", "hangar-webhook"],
                RunnerSetRegistration::StatefulSetSecret,
            ),
            (
                vec![
                    "--admission-addr",
                    "0.0.0.0:9443",
                    "--webhook-service-name",
                    "hangar-webhook",
                ],
                RunnerSetRegistration::PodWebhook,
            ),
            (
                vec![
                    "--admission-addr",
                    "127.0.0.1:9443",
                    "--webhook-url-base",
                    "https://127.0.0.1:9443",
                ],
                RunnerSetRegistration::PodWebhook,
            ),
        ] {
            let cli =
                Cli::try_parse_from(std::iter::once("hangar").chain(args.iter().copied())).unwrap();
            assert_eq!(cli.admission.runner_set_registration(), mode, "{args:?}");
        }
    }
}
