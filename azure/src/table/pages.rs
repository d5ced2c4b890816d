//! Paging through a query: every reader of a table (backup scans, range probes, verify,
//! conflict checks) follows continuations through this one type, so the service's rules
//! live in one place: pages may be short or empty and still continue, `NextRowKey` may be
//! absent, and only the absence of both headers ends a query.

use futures::Stream;

use super::{Continuation, Entity, EntityPage, Query, TableClient};
use crate::error::Result;

/// The pages of one query, in key order.
#[derive(Clone)]
pub struct Pages {
    client: TableClient,
    table: String,
    query: Query,
    state: State,
}

#[derive(Clone)]
enum State {
    Start,
    Next(Continuation),
    Done,
}

impl Pages {
    pub(super) fn new(client: TableClient, table: &str, query: Query) -> Self {
        Pages {
            client,
            table: table.to_string(),
            query,
            state: State::Start,
        }
    }

    /// The next page, or `None` once the service has said the query is complete. An
    /// error ends the query: callers start a new one to try again.
    pub async fn next_page(&mut self) -> Option<Result<EntityPage>> {
        let continuation = match std::mem::replace(&mut self.state, State::Done) {
            State::Done => return None,
            State::Start => None,
            State::Next(c) => Some(c),
        };
        let page = self
            .client
            .query_page(&self.table, &self.query, continuation.as_ref())
            .await;
        if let Ok(p) = &page
            && let Some(c) = &p.continuation
        {
            self.state = State::Next(c.clone());
        }
        Some(page)
    }

    /// The first entity of the query, skipping empty pages; `None` if it has none.
    pub async fn first_entity(self) -> Result<Option<Entity>> {
        Ok(self
            .first_filled_page()
            .await?
            .and_then(|page| page.entities.into_iter().next()))
    }

    /// The first page that holds entities, skipping empty pages with a continuation
    /// (the service stops at partition boundaries and time limits); `None` if the query
    /// has none.
    pub async fn first_filled_page(mut self) -> Result<Option<EntityPage>> {
        while let Some(page) = self.next_page().await {
            let page = page?;
            if !page.entities.is_empty() {
                return Ok(Some(page));
            }
        }
        Ok(None)
    }

    /// Every entity of the query, in key order. Only for queries known to be small.
    pub async fn collect_entities(mut self) -> Result<Vec<Entity>> {
        let mut out = Vec::new();
        while let Some(page) = self.next_page().await {
            out.extend(page?.entities);
        }
        Ok(out)
    }

    /// The pages as a stream.
    pub fn into_stream(self) -> impl Stream<Item = Result<EntityPage>> + Send + 'static {
        futures::stream::unfold(self, |mut pages| async move {
            let page = pages.next_page().await?;
            Some((page, pages))
        })
    }
}
