//! The kinds this ingest accepts, written from the design's table and not shared
//! with the collector (collector-design.md §4 "Payloads for one pod", §10 "Upsert";
//! review b30b1a0 finding 15: a gate or kind bug must not be mirrored on both sides).
//!
//! | kind | source | shape | natural key | merge |
//! |---|---|---|---|---|
//! | `usage_snapshot` | measured | records | pod_uid, container, window_start, window_seconds | replace unless final |
//! | `usage_window` | measured | records | same key space (`usage`) | replace, mark final |
//! | `process_peaks` | measured | records | namespace, workload_kind, workload_name, container, pod_uid, image_digest | replace |
//! | `collection_coverage` | agent | whole payload | pod_uid | replace |
//! | `oom_observed` | measured | `event` | pod_uid, container, container_started_at, oom_kill_total | insert once |

/// A registered kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    UsageSnapshot,
    UsageWindow,
    ProcessPeaks,
    CollectionCoverage,
    OomObserved,
}

/// How a row is merged with the stored one (contract §4 "Delivery semantics").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Replace unless the stored row is final (`usage_snapshot`).
    Snapshot,
    /// Replace and mark final (`usage_window`: closed beats open).
    Final,
    /// Replace (`process_peaks`, `collection_coverage`: supersede).
    Replace,
    /// Insert once (`oom_observed`: events accumulate, resends are ignored).
    Once,
}

/// Where a payload's records are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A `records` array, one row per element.
    Records,
    /// The whole payload is one row.
    Whole,
    /// One `event` object, the payload is one row.
    Event,
}

impl Kind {
    /// Every registered kind.
    pub const ALL: [Kind; 5] = [
        Kind::UsageSnapshot,
        Kind::UsageWindow,
        Kind::ProcessPeaks,
        Kind::CollectionCoverage,
        Kind::OomObserved,
    ];

    /// The wire name (the `{kind}` path segment and the body's `kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::UsageSnapshot => "usage_snapshot",
            Kind::UsageWindow => "usage_window",
            Kind::ProcessPeaks => "process_peaks",
            Kind::CollectionCoverage => "collection_coverage",
            Kind::OomObserved => "oom_observed",
        }
    }

    /// The kind a wire name names.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The registered provenance (contract §4: never merged across provenances).
    pub fn source(self) -> &'static str {
        match self {
            Kind::CollectionCoverage => "agent",
            Kind::UsageSnapshot | Kind::UsageWindow | Kind::ProcessPeaks | Kind::OomObserved => "measured",
        }
    }

    /// The key space: both usage kinds share one, so a window beats its snapshots.
    pub fn group(self) -> &'static str {
        match self {
            Kind::UsageSnapshot | Kind::UsageWindow => "usage",
            other => other.as_str(),
        }
    }

    /// How a row of this kind merges.
    pub fn merge(self) -> Merge {
        match self {
            Kind::UsageSnapshot => Merge::Snapshot,
            Kind::UsageWindow => Merge::Final,
            Kind::ProcessPeaks | Kind::CollectionCoverage => Merge::Replace,
            Kind::OomObserved => Merge::Once,
        }
    }

    /// Where the rows are.
    pub fn shape(self) -> Shape {
        match self {
            Kind::UsageSnapshot | Kind::UsageWindow | Kind::ProcessPeaks => Shape::Records,
            Kind::CollectionCoverage => Shape::Whole,
            Kind::OomObserved => Shape::Event,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_the_design() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::parse("oom_kill"), None);
        assert_eq!(Kind::parse("Usage_Snapshot"), None);
        assert_eq!(Kind::UsageWindow.group(), Kind::UsageSnapshot.group());
        assert_eq!(Kind::CollectionCoverage.source(), "agent");
        assert_eq!(Kind::OomObserved.merge(), Merge::Once);
    }
}
