//! Which identity-provider failures are configuration, not a passing fault: a wrong
//! client secret, an unknown tenant or application, a federated credential that matches
//! nothing, `az` not signed in or not installed. The SDK hands them over as text, so they
//! are recognised by Entra ID's `AADSTS` error codes and the Azure CLI's own words.
//! Retrying cannot mend them; the command exits as a configuration error (2).

/// Entra ID errors that a retry cannot mend (`AADSTS<code>`): the credential, tenant,
/// application or federation is wrong or expired.
const CONFIGURATION_CODES: &[&str] = &[
    "AADSTS7000215", // invalid client secret
    "AADSTS7000222", // client secret expired
    "AADSTS7000216", // client assertion or secret required
    "AADSTS700016",  // application not found in the tenant
    "AADSTS700027",  // client assertion signature invalid
    "AADSTS70021",   // no federated identity record matches the assertion
    "AADSTS700213",  // no federated identity record matches the subject
    "AADSTS700211",  // no federated identity record matches the issuer
    "AADSTS90002",   // tenant not found
    "AADSTS900023",  // tenant identifier malformed
    "AADSTS90013",   // invalid input (malformed request)
    "AADSTS50034",   // user account does not exist
    "AADSTS50126",   // wrong user name or password
    "AADSTS70043",   // refresh token expired (az: sign in again)
    "AADSTS700082",  // refresh token expired through inactivity
    "AADSTS50173",   // grant expired (password changed)
    "AADSTS500011",  // resource principal not found (wrong scope)
    "AADSTS70011",   // invalid scope
];

/// What the Azure CLI says when it cannot hand out a token until someone acts.
const AZURE_CLI_MARKERS: &[&str] = &[
    "Please run 'az login'",
    "az not found on PATH",
    "Azure CLI not found",
];

/// Whether `message` (an identity provider's failure, as the SDK put it) is a
/// configuration error: retrying the same command cannot succeed.
pub fn misconfigured(message: &str) -> bool {
    // `AADSTS7000215` must not match `AADSTS70002`: compare whole codes.
    let codes = message.match_indices("AADSTS").map(|(i, _)| {
        let digits = message[i + 6..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(message.len(), |n| i + 6 + n);
        &message[i..digits]
    });
    codes.into_iter().any(|c| CONFIGURATION_CODES.contains(&c))
        || AZURE_CLI_MARKERS.iter().any(|m| message.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_failures_are_told_from_passing_ones() {
        for config in [
            "AADSTS7000215: Invalid client secret provided.",
            "ClientSecretCredential authentication failed. AADSTS90002: Tenant '0' not found.",
            "WorkloadIdentityCredential: AADSTS70021: No matching federated identity record",
            "AzureCliCredential authentication failed. ERROR: Please run 'az login' to setup account.",
            "AzureCliCredential authentication failed. az not found on PATH",
            "ERROR: AADSTS70043: The refresh token has expired",
        ] {
            assert!(misconfigured(config), "{config}");
        }
        for passing in [
            "AADSTS50020 something else", // not in the list
            "AADSTS700021",               // a longer code that starts like one in the list
            "AADSTS7000",                 // a shorter one
            "connection refused",
            "retry policy expired",
            "HTTP 503 from the token endpoint",
            "AADSTS90033: A transient error has occurred. Please try again.",
        ] {
            assert!(!misconfigured(passing), "{passing}");
        }
    }
}
