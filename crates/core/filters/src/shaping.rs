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

use dataplane::{Access, Args, Batch, Ctx, Filter, FilterError, FilterSpec, Kind, Param};
use shape::config::{Kind as BucketKind, Limit};
use shape::{Config, Segment, Shaper};

pub struct Shape {
    seg: Segment,
    group: bool,
    blocks: u64,
    bytes: u64,
}

fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
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

pub static SHAPE: FilterSpec = FilterSpec::new("shape", Access::Metadata, make)
    .synopsis("shape rate=R [burst=B] [policy=token|leaky|token-leaky] [peak=P] [group=NAME]")
    .description(
        "Paces the stream to a byte rate with a token bucket (bursts up to burst=), a leaky\n\
         bucket (a steady stream) or both (bursts drained at peak=): each block waits for its\n\
         bytes' tokens. The buckets are those of `streamline shape`; group=NAME shares the\n\
         budget of `streamline shape --group NAME` programs (rate= may then be left out).\n\
         Rates: 10MB/s, 80Mbit, 1.5GiB/s, 500k. Data and classes pass unchanged.",
    )
    .params(&[
        Param::new(
            "rate",
            "bytes per second, e.g. 10MB/s or 80Mbit (also positional)",
        )
        .at(0),
        Param::new(
            "burst",
            "bucket depth, e.g. 64KiB (default 20 ms of the rate, at least 16 KiB)",
        ),
        Param::new(
            "policy",
            "token (default), leaky or token-leaky (also \"token+leaky\")",
        )
        .kind(Kind::Choice(&[
            "token",
            "leaky",
            "token-leaky",
            "token+leaky",
        ]))
        .default("token"),
        Param::new("peak", "peak rate of token-leaky (default twice the rate)"),
        Param::new("group", "share the budget of a shaping group"),
    ])
    .classes("unchanged")
    .example("streamline run 'gen count=1000 size=1K | shape rate=100KB/s | count'")
    .replication(dataplane::Replication::Never(
        "one budget paces the whole stream",
    ));

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
        let e = SHAPE
            .build(&args(&[("rate", "10 furlongs")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("furlongs"), "{e}");
        let e = SHAPE.build(&args(&[])).err().unwrap().to_string();
        assert!(e.contains("rate"), "{e}");
        let e = SHAPE
            .build(&args(&[("rate", "1M"), ("burst", "10")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("quantum"), "{e}");
        let e = SHAPE
            .build(&args(&[("group", "../x")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not allowed"), "{e}");
        assert!(SHAPE
            .build(&args(&[("rate", "1MB/s"), ("policy", "leaky")]))
            .is_ok());
    }
}
