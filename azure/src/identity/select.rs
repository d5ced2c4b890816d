//! Which identity to use: one named explicitly, or `auto`, a fixed order over the
//! environment (no network probes), so the choice can be explained and predicted.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::IdentityConfig;

/// The `auto` rule, as `--help` states it.
pub const AUTO_RULE: &str = "auto picks the first that applies: AZURE_FEDERATED_TOKEN_FILE set → workload; \
AZURE_CLIENT_SECRET set → client-secret; AZURE_CLIENT_CERTIFICATE_PATH set → client-certificate; \
a managed identity id given, IDENTITY_ENDPOINT and IDENTITY_HEADER set, or an Azure VM → managed; \
`az` on PATH → azure-cli; otherwise managed (IMDS)";

/// Which Entra ID credential to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IdentityKind {
    /// Chosen from the environment by [`AUTO_RULE`].
    #[default]
    Auto,
    /// AKS workload identity: a federated Kubernetes token exchanged for an Entra token.
    Workload,
    /// An Azure managed identity (system-assigned, or user-assigned by id).
    Managed,
    /// A service principal with a client secret.
    ClientSecret,
    /// A service principal with a certificate.
    ClientCertificate,
    /// The signed-in Azure CLI user (`az account get-access-token`).
    AzureCli,
}

impl IdentityKind {
    /// Every kind, with its name on the command line.
    pub const NAMES: [(&'static str, IdentityKind); 6] = [
        ("auto", IdentityKind::Auto),
        ("workload", IdentityKind::Workload),
        ("managed", IdentityKind::Managed),
        ("client-secret", IdentityKind::ClientSecret),
        ("client-certificate", IdentityKind::ClientCertificate),
        ("azure-cli", IdentityKind::AzureCli),
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .unwrap_or("auto")
    }
}

impl fmt::Display for IdentityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IdentityKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        let alias = match s.as_str() {
            "workload-identity" => "workload",
            "managed-identity" | "msi" => "managed",
            "cli" | "az" => "azure-cli",
            "certificate" => "client-certificate",
            other => other,
        };
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == alias)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                let names: Vec<_> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown identity {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// What `auto` may look at besides the variables: found by looking, not by asking.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Surroundings {
    /// An `az` executable is on PATH.
    pub az_on_path: bool,
    /// This is an Azure VM (its DMI chassis asset tag says so).
    pub azure_vm: bool,
}

/// Azure's VMs carry this chassis asset tag.
const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085";

impl Surroundings {
    pub fn look() -> Self {
        let az_on_path = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join("az"))));
        let azure_vm = std::fs::read_to_string("/sys/class/dmi/id/chassis_asset_tag")
            .is_ok_and(|t| t.trim() == AZURE_ASSET_TAG);
        Surroundings {
            az_on_path,
            azure_vm,
        }
    }
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.with_extension("cmd").is_file() || p.is_file()
    }
}

/// The concrete kind for a configuration, and why (for `auto`).
pub(crate) fn choose(
    config: &IdentityConfig,
    around: Surroundings,
) -> (IdentityKind, &'static str) {
    if config.kind != IdentityKind::Auto {
        return (config.kind, "chosen explicitly");
    }
    if config.federated_token_file.is_some() {
        (
            IdentityKind::Workload,
            "auto: AZURE_FEDERATED_TOKEN_FILE is set",
        )
    } else if config.client_secret.is_some() {
        (
            IdentityKind::ClientSecret,
            "auto: AZURE_CLIENT_SECRET is set",
        )
    } else if config.certificate_path.is_some() {
        (
            IdentityKind::ClientCertificate,
            "auto: AZURE_CLIENT_CERTIFICATE_PATH is set",
        )
    } else if config.managed_identity.is_some() {
        (
            IdentityKind::Managed,
            "auto: a managed identity id is given",
        )
    } else if config.managed_endpoint {
        (
            IdentityKind::Managed,
            "auto: IDENTITY_ENDPOINT and IDENTITY_HEADER are set",
        )
    } else if around.azure_vm {
        (IdentityKind::Managed, "auto: this is an Azure VM")
    } else if around.az_on_path {
        (IdentityKind::AzureCli, "auto: az is on PATH")
    } else {
        (
            IdentityKind::Managed,
            "auto: no other identity found in the environment",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Secret;

    #[test]
    fn names_round_trip_and_aliases() {
        for (n, k) in IdentityKind::NAMES {
            assert_eq!(n.parse::<IdentityKind>().unwrap(), k);
            assert_eq!(k.to_string(), n);
        }
        assert_eq!(
            "MSI".parse::<IdentityKind>().unwrap(),
            IdentityKind::Managed
        );
        assert_eq!(
            "az".parse::<IdentityKind>().unwrap(),
            IdentityKind::AzureCli
        );
        assert!(
            "kerberos"
                .parse::<IdentityKind>()
                .unwrap_err()
                .contains("azure-cli")
        );
    }

    #[test]
    fn auto_follows_a_fixed_order() {
        let none = Surroundings::default();
        let mut c = IdentityConfig {
            federated_token_file: Some("/t".into()),
            client_secret: Some(Secret::new("s".into())),
            ..Default::default()
        };
        assert_eq!(choose(&c, none).0, IdentityKind::Workload);
        c.federated_token_file = None;
        assert_eq!(choose(&c, none).0, IdentityKind::ClientSecret);
        c.client_secret = None;
        let cli = Surroundings {
            az_on_path: true,
            azure_vm: false,
        };
        assert_eq!(choose(&c, cli).0, IdentityKind::AzureCli);
        let vm = Surroundings {
            az_on_path: true,
            azure_vm: true,
        };
        assert_eq!(choose(&c, vm).0, IdentityKind::Managed);
        c.managed_endpoint = true;
        assert_eq!(choose(&c, cli).0, IdentityKind::Managed);
        c.managed_endpoint = false;
        assert_eq!(choose(&c, none).0, IdentityKind::Managed);
        c.kind = IdentityKind::AzureCli;
        assert_eq!(choose(&c, none).0, IdentityKind::AzureCli);
    }

    /// Regression: `MSI_ENDPOINT` alone (Cloud Shell), Azure ML's `MSI_SECRET`, Arc's
    /// `IMDS_ENDPOINT` and Service Fabric's thumbprint made `auto` choose a managed
    /// identity, whose credential speaks none of those protocols ("managed identity
    /// isn't supported", exit 2), though a signed-in `az` was on PATH.
    #[test]
    fn auto_picks_managed_only_where_the_credential_can_reach_it() {
        let config = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            IdentityConfig::from_vars(IdentityKind::Auto, move |name| {
                vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            })
        };
        let cli = Surroundings {
            az_on_path: true,
            azure_vm: false,
        };
        let app_service = config(&[("IDENTITY_ENDPOINT", "http://x"), ("IDENTITY_HEADER", "h")]);
        assert_eq!(choose(&app_service, cli).0, IdentityKind::Managed);
        for others in [
            &[("MSI_ENDPOINT", "http://x")][..],
            &[("MSI_ENDPOINT", "http://x"), ("MSI_SECRET", "s")],
            &[
                ("IDENTITY_ENDPOINT", "http://x"),
                ("IMDS_ENDPOINT", "http://y"),
            ],
            &[
                ("IDENTITY_ENDPOINT", "http://x"),
                ("IDENTITY_HEADER", "h"),
                ("IDENTITY_SERVER_THUMBPRINT", "t"),
            ],
        ] {
            assert_eq!(
                choose(&config(others), cli).0,
                IdentityKind::AzureCli,
                "{others:?}"
            );
        }
    }
}
