//! `shape rate=R [burst=B] [policy=token|leaky|token-leaky] [peak=P] [group=NAME]`: pace a
//! stream with the same buckets that shape programs' system calls (crate `shape`, seed
//! 004), e.g. before `tx` or a slow consumer.
//!
//! Owns: how a block is charged. A block of `len` bytes waits until its budget holds
//! `len` tokens (at most one burst), takes them, and any part beyond the burst is paid as
//! debt that later blocks wait out: a block is never cut or delayed past its turn, and the
//! stream leaves at the rate over any span longer than a burst. The budget is a shaping
//! segment: a private one, or with `group=NAME` the one that `streamline shape --group
//! NAME` programs share, so a pipeline and unmodified programs can split one link.
//!
//! The filter changes no data and no class; it only decides when blocks move on.

use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use shape::config::{Kind as BucketKind, Limit};
use shape::{Config, Segment, Shaper};

pub struct Shape {
    seg: Segment,
    group: bool,
    blocks: u64,
    bytes: u64,
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let kind: BucketKind = a.get("policy", None).unwrap_or("token").parse().map_err(
        |e: shape::config::ConfigError| {
            FilterError::bad(
                "policy",
                a.get("policy", None).unwrap_or(""),
                &e.to_string(),
            )
        },
    )?;
    let rate = a.get("rate", Some(0));
    let burst = a.get("burst", None);
    let peak = a.get("peak", None);
    let config = match rate {
        None => None,
        Some(r) => {
            let text = match burst {
                Some(b) => format!("{r}:{b}"),
                None => r.to_string(),
            };
            let net = Limit::parse("rate", &text, kind, peak)
                .map_err(|e| FilterError::bad("rate", &text, &e.to_string()))?;
            Some(Config {
                net,
                ..Default::default()
            })
        }
    };
    let (seg, group) = match (a.get("group", None), config) {
        (Some(g), c) => (
            Segment::join_group(g, c, std::process::id())
                .map_err(|e| FilterError::bad("group", g, &e.to_string()))?,
            true,
        ),
        (None, Some(c)) => (
            Segment::create_private(c)
                .map_err(|e| FilterError::invalid("cannot make the shaping budget", e))?,
            false,
        ),
        (None, None) => {
            return Err(FilterError::Missing {
                key: "rate".into(),
                expected: "a rate such as rate=10MB/s (or group=NAME to share a group's budget)"
                    .into(),
            })
        }
    };
    Ok(Box::new(Shape {
        seg,
        group,
        blocks: 0,
        bytes: 0,
    }))
}

impl Filter for Shape {
    fn process(&mut self, _cx: &mut Ctx<'_>, batch: &mut Batch) {
        let sh = Shaper::new(self.seg.shared());
        for t in &batch.tags {
            let len = t.len as u64;
            // waits for min(len, burst) tokens; what a block needs beyond that is debt
            let granted = sh.net_grant(0, len);
            sh.net_done(granted, len);
        }
        self.blocks += batch.len() as u64;
        self.bytes += batch.tags.iter().map(|t| t.len as u64).sum::<u64>();
    }
    fn summary(&self) -> Option<String> {
        // counts only (they are the same wherever the filter runs); timing is in `--stats`
        Some(format!(
            "shape: {} blocks, {} bytes paced at {}",
            self.blocks,
            self.bytes,
            self.seg.shared().config().net.describe()
        ))
    }
}

impl Drop for Shape {
    fn drop(&mut self) {
        if self.group {
            self.seg.leave(std::process::id());
        }
    }
}

// The declarations of this file's filters are data in the catalog
// (`catalog::shaping::SHAPE`); their constructors are below, paired with them in
// `filters::CONSTRUCTORS`.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonsense_rates_are_refused() {
        let args = |o: &[(&str, &str)]| {
            Args::new(
                "shape",
                vec![],
                o.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let build = |a: &Args| dataplane::decl::build(&catalog::shaping::SHAPE, make, a);
        let e = build(&args(&[("rate", "10 furlongs")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("furlongs"), "{e}");
        let e = build(&args(&[])).err().unwrap().to_string();
        assert!(e.contains("rate"), "{e}");
        let e = build(&args(&[("rate", "1M"), ("burst", "10")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("quantum"), "{e}");
        let e = build(&args(&[("group", "../x")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not allowed"), "{e}");
        assert!(build(&args(&[("rate", "1MB/s"), ("policy", "leaky")])).is_ok());
    }
}
