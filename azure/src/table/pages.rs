//! Paging through a query: every reader of a table (backup scans, range probes, verify,
//! conflict checks) follows continuations through this one type, so the service's rules
//! live in one place: pages may be short or empty and still continue, `NextRowKey` may be
//! absent, and only the absence of both headers ends a query.

use futures::Stream;

use super::{Continuation, Entity, EntityPage, MAX_PAGE_SIZE, Query, TableClient};
use crate::error::{Error, Result};

/// The pages of one query, in key order.
#[derive(Clone)]
pub struct Pages {
    client: TableClient,
    table: String,
    query: Query,
    /// The `$top` the query was made with; pages bounded by bytes ask for fewer.
    first_top: Option<u32>,
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
            first_top: query.top,
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
        let page = loop {
            let page = self
                .client
                .query_page(&self.table, &self.query, continuation.as_ref())
                .await;
            match (&page, self.query.top) {
                // Too large to read: the same page again, a quarter as long.
                (Err(Error::ResponseTooLarge { .. }), Some(top)) if top > 1 => {
                    self.query.top = Some((top / 4).max(1));
                }
                _ => break page,
            }
        };
        if let Ok(p) = &page {
            self.fit_top_to(p);
            if let Some(c) = &p.continuation {
                self.state = State::Next(c.clone());
            }
        }
        Some(page)
    }

    /// Where pages are bounded by bytes ([`Query::page_bytes`]), asks next for as many
    /// entities as the bound holds at the size this page's were (at most the service's
    /// 1,000), so pages of large entities are not read twice.
    fn fit_top_to(&mut self, page: &EntityPage) {
        let (Some(limit), Some(top)) = (self.query.page_bytes, self.query.top) else {
            return;
        };
        if page.entities.is_empty() || page.response_bytes == 0 {
            return;
        }
        let per_entity = page.response_bytes.div_ceil(page.entities.len());
        let fits = (limit / per_entity).clamp(1, MAX_PAGE_SIZE as usize) as u32;
        // Grow back only as far as the page asked for at first.
        self.query.top = Some(fits.min(self.first_top.unwrap_or(top)));
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
