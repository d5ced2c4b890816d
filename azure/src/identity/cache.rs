//! The process's Entra ID token cache: one access token for one scope, shared by every
//! client that uses the same identity (all three services, every account), refreshed
//! before it expires.
//!
//! * A token with at least [`REFRESH_BEFORE`] left (or half its lifetime, for tokens
//!   issued with less than twice that) is handed out as is.
//! * Below that, the next caller refreshes it, waiting at most [`REFRESH_WAIT`]; callers
//!   arriving meanwhile are handed the current token, which is still valid. Only when
//!   no valid token is left do callers wait for the one fetch (single flight) instead
//!   of asking the identity provider themselves.
//! * If a refresh fails or takes too long while the old token still has more than
//!   [`EXPIRY_SKEW`] left, the old token is used (with a warning) and the refresh is
//!   tried again after [`RETRY_AFTER_FAILURE`]. A hung identity endpoint once held every
//!   storage request behind the refresh until the operations' deadlines, though the
//!   token in hand had minutes left.
//! * A token with [`EXPIRY_SKEW`] or less left is never handed out: it could expire on
//!   its way to the service.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::time::OffsetDateTime;
use futures::future::BoxFuture;

use crate::credential::{TokenError, TokenProvider};
use crate::redact::Secret;

use super::claims::Claims;

/// Refresh a token once less than this is left (the SDKs' own margin).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);
/// A token with this little left counts as expired.
pub const EXPIRY_SKEW: Duration = Duration::from_secs(30);
/// After a failed refresh of a still valid token, wait this long before trying again.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);
/// The longest a caller waits for a refresh while the current token is still valid.
pub const REFRESH_WAIT: Duration = Duration::from_secs(5);

/// Where the cache reads the time: the wall clock, or a test's.
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// A cached token and what is known about it.
struct Cached {
    token: Secret<String>,
    expires_on: OffsetDateTime,
    /// When to refresh it: [`REFRESH_BEFORE`] before it expires, or half-way through
    /// its life if that is shorter (a token issued with 4 minutes left was fetched
    /// again for every request).
    refresh_at: OffsetDateTime,
    /// No refresh attempt before this (set after a failed refresh).
    quiet_until: Option<OffsetDateTime>,
}

/// Tokens for one scope from one credential, cached and refreshed; a [`TokenProvider`].
pub struct TokenCache {
    credential: Arc<dyn TokenCredential>,
    scope: String,
    /// Who the credential is, for messages (`workload identity (client id …)`).
    identity: String,
    clock: Clock,
    current: Mutex<Option<Cached>>,
    /// Held while fetching, so one caller fetches and the others wait.
    refresh: tokio::sync::Mutex<()>,
    /// Claims of the last token (names of the identity, never the token).
    claims: Mutex<Option<Claims>>,
    /// Why the credential's last token request got no answer, as its transport noted it.
    last_failure: Option<super::transport::LastFailure>,
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("identity", &self.identity)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

fn to_duration(d: azure_core::time::Duration) -> Duration {
    Duration::from_millis(d.whole_milliseconds().max(0) as u64)
}

impl TokenCache {
    /// A cache of `scope` tokens from `credential`, which `identity` describes.
    pub fn new(
        credential: Arc<dyn TokenCredential>,
        scope: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self::with_clock(
            credential,
            scope,
            identity,
            Arc::new(OffsetDateTime::now_utc),
        )
    }

    /// As [`TokenCache::new`], reading the time from `clock` (tests).
    pub fn with_clock(
        credential: Arc<dyn TokenCredential>,
        scope: impl Into<String>,
        identity: impl Into<String>,
        clock: Clock,
    ) -> Self {
        TokenCache {
            credential,
            scope: scope.into(),
            identity: identity.into(),
            clock,
            current: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            claims: Mutex::new(None),
            last_failure: None,
        }
    }

    /// Names, in a failure to get a token, why the last token request got no answer
    /// (`last`, noted by the credential's transport): the SDK says only "retry policy
    /// expired" of a token endpoint it could not reach or whose certificate it refused.
    pub(crate) fn with_last_failure(mut self, last: super::transport::LastFailure) -> Self {
        self.last_failure = Some(last);
        self
    }

    /// Time left on a token, zero if past.
    fn left(&self, expires_on: OffsetDateTime) -> Duration {
        to_duration(expires_on - (self.clock)())
    }

    /// The cached token if it needs no refresh now: fresh, or valid and in its quiet
    /// period after a failed refresh.
    fn usable_without_refresh(&self) -> Option<Secret<String>> {
        let current = self.current.lock().expect("token cache");
        let c = current.as_ref()?;
        let left = self.left(c.expires_on);
        let now = (self.clock)();
        let quiet = c.quiet_until.is_some_and(|q| now < q);
        // Never one about to expire, whatever its refresh time: a token issued for 33 s
        // is due half-way, after it counts as expired.
        ((now < c.refresh_at || quiet) && left > EXPIRY_SKEW).then(|| c.token.clone())
    }

    /// The cached token if it may still be handed out (more than [`EXPIRY_SKEW`] left).
    fn still_valid(&self) -> Option<Secret<String>> {
        let current = self.current.lock().expect("token cache");
        let c = current.as_ref()?;
        (self.left(c.expires_on) > EXPIRY_SKEW).then(|| c.token.clone())
    }

    /// After a refresh that failed (`why`): the current token if it is still valid,
    /// with a warning, and no new attempt for [`RETRY_AFTER_FAILURE`].
    fn keep_current(&self, why: &str) -> Option<Secret<String>> {
        let mut current = self.current.lock().expect("token cache");
        let c = current.as_mut()?;
        let left = self.left(c.expires_on);
        if left <= EXPIRY_SKEW {
            return None;
        }
        tracing::warn!(
            identity = %self.identity,
            left_s = left.as_secs(),
            error = %why,
            "refreshing the Entra ID token failed; using the current one until it expires"
        );
        c.quiet_until = Some((self.clock)() + RETRY_AFTER_FAILURE);
        Some(c.token.clone())
    }

    /// A token with time left, fetching a new one when needed.
    pub async fn get(&self) -> Result<Secret<String>, TokenError> {
        if let Some(t) = self.usable_without_refresh() {
            return Ok(t);
        }
        // With a valid token in hand, a refresh under way is not waited for, and this
        // caller's own refresh is given at most `REFRESH_WAIT`.
        let valid = self.still_valid();
        let _flight = match &valid {
            Some(valid) => match self.refresh.try_lock() {
                Ok(flight) => flight,
                Err(_) => return Ok(valid.clone()),
            },
            None => self.refresh.lock().await,
        };
        // Someone else may have refreshed while this caller waited.
        if let Some(t) = self.usable_without_refresh() {
            return Ok(t);
        }
        let fetched = match valid {
            Some(_) => tokio::time::timeout(REFRESH_WAIT, self.fetch())
                .await
                .unwrap_or_else(|_| {
                    Err(TokenError(format!(
                        "no token from {} within {} s",
                        self.identity,
                        REFRESH_WAIT.as_secs()
                    )))
                }),
            None => self.fetch().await,
        };
        fetched.or_else(|e| self.keep_current(&e.0).ok_or(e))
    }

    async fn fetch(&self) -> Result<Secret<String>, TokenError> {
        let access = self
            .credential
            .get_token(&[&self.scope], None)
            .await
            .map_err(|e| {
                let unanswered = self
                    .unanswered()
                    .map(|why| crate::credential::last_token_request(&why))
                    .unwrap_or_default();
                TokenError(format!(
                    "cannot get a token for {} as {}{unanswered}: {}",
                    self.scope,
                    self.identity,
                    crate::redact::redact_text(&e.to_string())
                ))
            })?;
        let left = self.left(access.expires_on);
        if left <= EXPIRY_SKEW {
            return Err(TokenError(format!(
                "{} returned a token that expires in {} s: its answer gave the token no \
                 lifetime (`expires_in`, `expires_on`), or this machine's clock is off",
                self.identity,
                left.as_secs()
            )));
        }
        let token = Secret::new(access.token.secret().to_string());
        tracing::debug!(identity = %self.identity, expires_in_s = left.as_secs(), "new Entra ID token");
        *self.claims.lock().expect("claims") = Claims::decode(token.expose());
        let before = azure_core::time::Duration::try_from(REFRESH_BEFORE.min(left / 2))
            .unwrap_or(azure_core::time::Duration::ZERO);
        *self.current.lock().expect("token cache") = Some(Cached {
            token: token.clone(),
            expires_on: access.expires_on,
            refresh_at: access.expires_on - before,
            quiet_until: None,
        });
        Ok(token)
    }

    /// Who the tokens belong to: the configured identity and, once a token was fetched,
    /// its `appid`/`oid`/`upn` claims.
    pub fn describe(&self) -> String {
        match &*self.claims.lock().expect("claims") {
            Some(c) if !c.is_empty() => format!("{} ({c})", self.identity),
            _ => self.identity.clone(),
        }
    }
}

impl TokenProvider for TokenCache {
    fn token(&self) -> BoxFuture<'_, Result<Secret<String>, TokenError>> {
        Box::pin(self.get())
    }

    fn identity(&self) -> Option<String> {
        Some(self.describe())
    }

    fn unanswered(&self) -> Option<String> {
        self.last_failure
            .as_ref()
            .and_then(|l| l.lock().expect("last token failure").clone())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

    use azure_core::credentials::{AccessToken, TokenRequestOptions};

    use super::*;

    /// A credential that counts fetches, issues `tok-N` valid for `lifetime_s` (by the
    /// test clock), can be told to fail, and takes 50 ms (tokio's paused clock).
    #[derive(Debug)]
    struct Fake {
        fetches: AtomicUsize,
        lifetime_s: i64,
        fail: AtomicBool,
        /// Never answer.
        hang: AtomicBool,
        now: Arc<AtomicI64>,
    }

    #[async_trait::async_trait]
    impl TokenCredential for Fake {
        async fn get_token(
            &self,
            scopes: &[&str],
            _: Option<TokenRequestOptions<'_>>,
        ) -> azure_core::Result<AccessToken> {
            assert_eq!(scopes, ["https://storage.azure.com/.default"]);
            let n = self.fetches.fetch_add(1, Ordering::SeqCst) + 1;
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.fail.load(Ordering::SeqCst) {
                return Err(azure_core::Error::with_message(
                    azure_core::error::ErrorKind::Credential,
                    "identity endpoint down",
                ));
            }
            let now = OffsetDateTime::from_unix_timestamp(self.now.load(Ordering::SeqCst)).unwrap();
            Ok(AccessToken::new(
                format!("tok-{n}"),
                now + azure_core::time::Duration::seconds(self.lifetime_s),
            ))
        }
    }

    fn cache(lifetime_s: i64) -> (Arc<TokenCache>, Arc<Fake>, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(1_700_000_000));
        let fake = Arc::new(Fake {
            fetches: AtomicUsize::new(0),
            lifetime_s,
            fail: AtomicBool::new(false),
            hang: AtomicBool::new(false),
            now: now.clone(),
        });
        let n = now.clone();
        let clock: Clock = Arc::new(move || {
            OffsetDateTime::from_unix_timestamp(n.load(Ordering::SeqCst)).unwrap()
        });
        let cache = TokenCache::with_clock(
            fake.clone(),
            "https://storage.azure.com/.default",
            "test identity",
            clock,
        );
        (Arc::new(cache), fake, now)
    }

    fn tok(s: Secret<String>) -> String {
        s.expose().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn reuses_a_fresh_token_and_refreshes_near_expiry() {
        let (c, fake, now) = cache(3600);
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        now.fetch_add(3600 - 301, Ordering::SeqCst); // 301 s left: still fresh
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 1);
        now.fetch_add(2, Ordering::SeqCst); // 299 s left: refresh
        assert_eq!(tok(c.get().await.unwrap()), "tok-2");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_fetch() {
        let (c, fake, now) = cache(3600);
        let all = futures::future::join_all((0..20).map(|_| c.get())).await;
        assert!(all.into_iter().all(|t| tok(t.unwrap()) == "tok-1"));
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 1);
        now.fetch_add(3500, Ordering::SeqCst);
        // 100 s left: one caller refreshes, the others are handed the valid token.
        let all = futures::future::join_all((0..20).map(|_| c.get())).await;
        let all: Vec<String> = all.into_iter().map(|t| tok(t.unwrap())).collect();
        assert!(all.iter().all(|t| t == "tok-1" || t == "tok-2"), "{all:?}");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
        assert_eq!(tok(c.get().await.unwrap()), "tok-2");
        // Expired: every caller waits for the one fetch.
        now.fetch_add(3600, Ordering::SeqCst);
        let all = futures::future::join_all((0..20).map(|_| c.get())).await;
        assert!(all.into_iter().all(|t| tok(t.unwrap()) == "tok-3"));
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 3);
    }

    /// Regression: a token endpoint that could not be reached (refused, or its
    /// certificate not trusted) was reported after the SDK's retries only as "retry
    /// policy expired" (`--auth-mode login` audit). The transport's note of why is added.
    #[tokio::test(start_paused = true)]
    async fn a_failure_names_why_the_last_token_request_got_no_answer() {
        let (c, fake, _) = cache(3600);
        fake.fail.store(true, Ordering::SeqCst);
        let last = super::super::transport::LastFailure::default();
        *last.lock().unwrap() = Some(
            "login.example:443: error sending request: invalid peer certificate: UnknownIssuer"
                .into(),
        );
        let c = Arc::into_inner(c).unwrap().with_last_failure(last.clone());
        let e = c.get().await.unwrap_err().to_string();
        assert!(
            e.contains("test identity (last token request: login.example:443: error sending request: invalid peer certificate: UnknownIssuer): identity endpoint down"),
            "{e}"
        );
        // Once a request was answered, nothing is added.
        *last.lock().unwrap() = None;
        let e = c.get().await.unwrap_err().to_string();
        assert!(!e.contains("last token request"), "{e}");
    }

    /// Regression: a hung identity endpoint held every request behind the refresh
    /// though the token in hand had minutes left (audit of `--auth-mode login`: a
    /// worker read no queue for 4.5 minutes). Now one caller waits at most
    /// `REFRESH_WAIT`, the others not at all.
    #[tokio::test(start_paused = true)]
    async fn a_hung_refresh_does_not_hold_callers_while_the_token_is_valid() {
        let (c, fake, now) = cache(3600);
        c.get().await.unwrap();
        fake.hang.store(true, Ordering::SeqCst);
        now.fetch_add(3400, Ordering::SeqCst); // 200 s left
        let started = tokio::time::Instant::now();
        let all = futures::future::join_all((0..10).map(|_| c.get())).await;
        assert!(all.into_iter().all(|t| tok(t.unwrap()) == "tok-1"));
        assert!(started.elapsed() <= REFRESH_WAIT + Duration::from_millis(100));
        // Quiet period after the failure: no wait at all.
        let started = tokio::time::Instant::now();
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
    }

    /// Regression: a token issued with less than `REFRESH_BEFORE` left (IMDS and App
    /// Service hand out cached ones) was fetched again for every request: 64 token
    /// requests for 64 storage requests. It is refreshed half-way through its life.
    #[tokio::test(start_paused = true)]
    async fn a_short_lived_token_is_refreshed_half_way() {
        let (c, fake, now) = cache(240);
        for _ in 0..10 {
            assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        }
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 1);
        now.fetch_add(119, Ordering::SeqCst);
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        now.fetch_add(2, Ordering::SeqCst);
        assert_eq!(tok(c.get().await.unwrap()), "tok-2");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
        // A token of 33 s is due half-way, after it counts as expired: at 29 s left it
        // is not handed out, whatever its refresh time says.
        let (c, _fake, now) = cache(33);
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        now.fetch_add(4, Ordering::SeqCst);
        assert_eq!(tok(c.get().await.unwrap()), "tok-2");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_keeps_the_valid_token_but_never_an_expired_one() {
        let (c, fake, now) = cache(3600);
        c.get().await.unwrap();
        fake.fail.store(true, Ordering::SeqCst);
        now.fetch_add(3500, Ordering::SeqCst); // 100 s left
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
        // Quiet period: no new attempt for a while.
        now.fetch_add(10, Ordering::SeqCst);
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
        // 90 - 31 = 59 s left, quiet period over: tries again, still serves the old one.
        now.fetch_add(31, Ordering::SeqCst);
        assert_eq!(tok(c.get().await.unwrap()), "tok-1");
        assert_eq!(fake.fetches.load(Ordering::SeqCst), 3);
        // 29 s left: too close to expiry to hand out, and the fetch fails.
        now.fetch_add(30, Ordering::SeqCst);
        let e = c.get().await.unwrap_err();
        assert!(e.0.contains("identity endpoint down"), "{e}");
        assert!(e.0.contains("test identity"), "{e}");
        assert!(!e.0.contains("tok-"), "{e}");
        now.fetch_add(100, Ordering::SeqCst);
        assert!(c.get().await.is_err());
        fake.fail.store(false, Ordering::SeqCst);
        assert_eq!(tok(c.get().await.unwrap()), "tok-6");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_that_is_born_expired_is_refused() {
        let (c, _fake, _now) = cache(10);
        let e = c.get().await.unwrap_err();
        assert!(e.0.contains("clock"), "{e}");
    }
}
