//! The last few pages an attempt read, summarised by their partitions, so that where
//! the last page alone lies mostly in one partition, the fewest last pages that do not
//! can measure how densely partitions lie ([`super::ReadSoFar::recent_pages`]).

use std::collections::VecDeque;

use super::PageRead;
use crate::keys::EntityKey;

/// The most pages [`PageWindow`] keeps.
pub const RECENT_PAGES: usize = 4;

/// One page, by its partitions.
#[derive(Debug, Clone)]
struct PageSummary {
    /// Its first key.
    first: EntityKey,
    /// Its entities.
    entities: u64,
    /// Entities of its first partition, from its start.
    head_run: u64,
    /// Its last partition.
    tail_pk: String,
    /// Entities of its last partition, up to its end.
    tail_run: u64,
    /// The most entities of one partition inside it.
    largest: u64,
}

/// A page being read, key by key.
#[derive(Debug, Default)]
pub struct PageTally {
    page: Option<PageSummary>,
}

impl PageTally {
    /// Counts the next key of the page (keys come in order).
    pub fn note(&mut self, key: &EntityKey) {
        match &mut self.page {
            None => {
                self.page = Some(PageSummary {
                    first: key.clone(),
                    entities: 1,
                    head_run: 1,
                    tail_pk: key.pk.clone(),
                    tail_run: 1,
                    largest: 1,
                });
            }
            Some(p) => {
                p.entities += 1;
                if p.tail_pk == key.pk {
                    p.tail_run += 1;
                    if p.head_run + 1 == p.entities {
                        p.head_run += 1;
                    }
                } else {
                    p.tail_pk.clone_from(&key.pk);
                    p.tail_run = 1;
                }
                p.largest = p.largest.max(p.tail_run);
            }
        }
    }
}

/// The last [`RECENT_PAGES`] pages read.
#[derive(Debug, Default)]
pub struct PageWindow {
    pages: VecDeque<PageSummary>,
}

impl PageWindow {
    /// Adds a page read whole (an empty one is not a page).
    pub fn push(&mut self, page: PageTally) {
        let Some(page) = page.page else { return };
        if self.pages.len() == RECENT_PAGES {
            self.pages.pop_front();
        }
        self.pages.push_back(page);
    }

    /// The last page read.
    pub fn last(&self) -> Option<PageRead<'_>> {
        self.pages.back().map(|p| PageRead {
            first: &p.first,
            entities: p.entities,
            largest_partition: p.largest,
        })
    }

    /// Where the last page alone lies half or more in one partition: the fewest last
    /// pages, two or more, of which no partition holds half; `None` when none do.
    pub fn recent(&self) -> Option<PageRead<'_>> {
        let last = self.pages.back()?;
        if 2 * last.largest < last.entities {
            return None;
        }
        (2..=self.pages.len()).find_map(|k| {
            let window = self.pages.range(self.pages.len() - k..);
            let (entities, largest) = spread(window.clone());
            let first = &window.clone().next()?.first;
            (2 * largest < entities).then_some(PageRead {
                first,
                entities,
                largest_partition: largest,
            })
        })
    }
}

/// The entities of consecutive pages and the most of them in one partition, a
/// partition's entities counted across the pages it spans.
fn spread<'a>(pages: impl Iterator<Item = &'a PageSummary>) -> (u64, u64) {
    let (mut entities, mut largest) = (0, 0);
    let mut carry: Option<(&str, u64)> = None;
    for p in pages {
        entities += p.entities;
        let head = match carry {
            Some((pk, run)) if pk == p.first.pk => run + p.head_run,
            _ => p.head_run,
        };
        largest = largest.max(head).max(p.largest);
        // A page of one partition carries the run on whole.
        let tail = if p.head_run == p.entities {
            head
        } else {
            p.tail_run
        };
        carry = Some((p.tail_pk.as_str(), tail));
        largest = largest.max(tail);
    }
    (entities, largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(keys: &[(&str, u64)]) -> PageTally {
        let mut t = PageTally::default();
        for (pk, n) in keys {
            for i in 0..*n {
                t.note(&EntityKey::new(*pk, format!("{i:05}")));
            }
        }
        t
    }

    #[test]
    fn a_page_across_partitions_needs_no_window() {
        let mut w = PageWindow::default();
        w.push(page(&[("a", 400), ("b", 400), ("c", 200)]));
        let last = w.last().unwrap();
        assert_eq!((last.entities, last.largest_partition), (1_000, 400));
        assert!(w.recent().is_none());
    }

    /// Pages of one partition each: the fewest that span partitions evenly.
    #[test]
    fn pages_of_one_partition_each_are_measured_together() {
        let mut w = PageWindow::default();
        w.push(page(&[("a", 133), ("b", 867)]));
        w.push(page(&[("b", 133), ("c", 867)]));
        assert!(w.recent().is_none(), "b holds 1,000 of 2,000");
        w.push(page(&[("c", 133), ("d", 867)]));
        let r = w.recent().unwrap();
        assert_eq!(
            (r.first.pk.as_str(), r.entities, r.largest_partition),
            ("a", 3_000, 1_000)
        );
        // The fewest: the oldest page is left out once three more measure.
        w.push(page(&[("d", 133), ("e", 867)]));
        let r = w.recent().unwrap();
        assert_eq!((r.first.pk.as_str(), r.entities), ("b", 3_000));
    }

    /// A partition spanning pages is counted whole, so a large one is never taken for
    /// a spread.
    #[test]
    fn a_partition_across_pages_counts_whole() {
        let mut w = PageWindow::default();
        w.push(page(&[("a", 1_000)]));
        w.push(page(&[("a", 1_000)]));
        w.push(page(&[("a", 900), ("b", 100)]));
        assert!(w.recent().is_none());
        assert_eq!(spread(w.pages.iter()), (3_000, 2_900));
    }
}
