//! What a 401 or 403 to a bearer token means: which identity was refused by which account
//! and service, and which Azure data role the operation needs. The token is never shown,
//! only the identity's ids and the claims read from it.

use std::sync::Arc;

use reqwest::Method;

use crate::credential::TokenProvider;
use crate::error::Error;
use crate::service::Service;

/// The least built-in data role that allows an operation, and what tablevault does with it.
pub fn required_role(service: Service, op: &str, method: &Method) -> &'static str {
    let reads = matches!(*method, Method::GET | Method::HEAD);
    match service {
        Service::Table if reads => {
            "Storage Table Data Reader (reading tables: backup workers, backup planning)"
        }
        Service::Table => "Storage Table Data Contributor (creating and writing tables: restore)",
        Service::Blob if reads => {
            "Storage Blob Data Reader (reading backups; tablevault's coordinator and workers also write records, so they need Storage Blob Data Contributor)"
        }
        Service::Blob => {
            "Storage Blob Data Contributor (writing backups and job records: coordinator and workers)"
        }
        Service::Queue => match op {
            "Put Message" => "Storage Queue Data Message Sender (putting task messages)",
            "Get Messages" | "Delete Message" | "Peek Messages" => {
                "Storage Queue Data Message Processor (claiming and deleting task messages)"
            }
            // Update Message needs messages/write, which neither message role has.
            _ => "Storage Queue Data Contributor (creating queues, updating message visibility)",
        },
    }
}

/// What a storage client knows for explaining a refusal: its account, service and token
/// provider.
#[derive(Clone)]
pub(crate) struct Refusal {
    pub account: String,
    pub service: Service,
    pub provider: Arc<dyn TokenProvider>,
}

impl Refusal {
    /// Adds the identity, account, service and missing role to a 401/403; other errors
    /// pass through.
    pub fn explain(&self, error: Error, method: &Method) -> Error {
        match error {
            Error::Service {
                op,
                status: status @ (401 | 403),
                code,
                message,
                retry_after,
            } => {
                let who = self
                    .provider
                    .identity()
                    .unwrap_or_else(|| "a bearer token".to_string());
                let role = required_role(self.service, op, method);
                // The service answers 401 to a token it does not accept (wrong audience or
                // tenant, expired); Azurite answers 403 AuthenticationFailed instead.
                let token_refused = status == 401
                    || matches!(
                        code.as_deref(),
                        Some("AuthenticationFailed" | "InvalidAuthenticationInfo")
                    );
                let hint = if token_refused {
                    format!(
                        "the {} service of account {} did not accept the Entra ID token of {who}: \
                         check the identity's tenant and that the token is for https://storage.azure.com \
                         (the operation also needs the role {role})",
                        self.service, self.account
                    )
                } else {
                    format!(
                        "{who} is not allowed this on the {} service of account {}: \
                         it needs the role {} on the account (or the container/queue/table)",
                        self.service, self.account, role
                    )
                };
                Error::Service {
                    op,
                    status,
                    code,
                    message: format!("{message} — {}", crate::redact::redact_text(&hint)),
                    retry_after,
                }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;

    use super::*;
    use crate::credential::TokenError;
    use crate::redact::Secret;

    #[derive(Debug)]
    struct Named;
    impl TokenProvider for Named {
        fn token(&self) -> BoxFuture<'_, Result<Secret<String>, TokenError>> {
            Box::pin(async { Ok(Secret::new("eyJ.secret-token.sig".into())) })
        }
        fn identity(&self) -> Option<String> {
            Some("workload identity (client id c-1) (appid c-1, oid o-2)".into())
        }
    }

    fn refused(status: u16, op: &'static str) -> Error {
        Error::Service {
            op,
            status,
            code: Some("AuthorizationPermissionMismatch".into()),
            message:
                "This request is not authorized to perform this operation using this permission."
                    .into(),
            retry_after: None,
        }
    }

    #[test]
    fn a_403_names_identity_account_service_and_role() {
        let r = Refusal {
            account: "prodacct".into(),
            service: Service::Table,
            provider: Arc::new(Named),
        };
        let e = r.explain(refused(403, "Insert Or Replace Entity"), &Method::PUT);
        let text = e.to_string();
        for part in [
            "HTTP 403 AuthorizationPermissionMismatch",
            "workload identity (client id c-1)",
            "oid o-2",
            "table service of account prodacct",
            "Storage Table Data Contributor",
        ] {
            assert!(text.contains(part), "{part:?} missing in {text}");
        }
        assert!(!text.contains("secret-token"));
        assert!(!e.is_retryable());
        let q = Refusal {
            service: Service::Queue,
            ..r.clone()
        };
        let text = q
            .explain(refused(403, "Put Message"), &Method::POST)
            .to_string();
        assert!(text.contains("Storage Queue Data Message Sender"), "{text}");
        let b = Refusal {
            service: Service::Blob,
            ..r.clone()
        };
        let text = b
            .explain(refused(403, "Get Blob"), &Method::GET)
            .to_string();
        assert!(text.contains("Storage Blob Data Reader"), "{text}");
        let text = b
            .explain(refused(401, "Get Blob"), &Method::GET)
            .to_string();
        assert!(
            text.contains("did not accept the Entra ID token of workload identity"),
            "{text}"
        );
        // Other errors are untouched.
        let other = r.explain(refused(404, "x"), &Method::GET).to_string();
        assert!(!other.contains("workload"));
    }
}
