//! The declarations of `filters::shaping`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param, Replication};

pub static SHAPE: FilterSpec = FilterSpec::new("shape", Access::Metadata)
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
    .replication(Replication::Never("one budget paces the whole stream"));
