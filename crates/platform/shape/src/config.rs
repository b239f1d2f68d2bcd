//! What a shaping policy says, as the user writes it (`--net 10MB/s:64K --policy leaky
//! --priority 2 --prio-policy latency`) and as the shared segment stores it.
//!
//! Owns: the policy vocabulary (bucket kinds, priority policies, disk cost modes), its
//! defaults (burst, leaky quantum, peak), and the derived bucket constants. The segment
//! keeps one [`Config`]; every member process reads its budget from there, never from its
//! own arguments (one home for the fact).

use crate::bucket::Params;
use crate::units::{self, UnitError};
use thiserror::Error;

/// Number of priority levels; 0 is served first.
pub const LEVELS: usize = 10;

/// The two budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Resource {
    Net = 0,
    Disk = 1,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::Net => "net",
            Resource::Disk => "disk",
        }
    }
}

/// How a budget's bucket(s) behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Saves idle credit up to the burst.
    Token = 0,
    /// A steady stream: one quantum deep.
    Leaky = 1,
    /// A token bucket whose output is drained by a leaky bucket at the peak rate.
    TokenLeaky = 2,
}

impl std::str::FromStr for Kind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "token" => Ok(Kind::Token),
            "leaky" => Ok(Kind::Leaky),
            // `+` is an operator in a pipeline, where `token-leaky` needs no quotes
            "token+leaky" | "leaky+token" | "token-leaky" => Ok(Kind::TokenLeaky),
            _ => Err(ConfigError::Word {
                what: "policy",
                text: s.into(),
                expected: "token, leaky or token+leaky (token-leaky)",
            }),
        }
    }
}

/// How a call's priority follows from what its connection or file has already moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PrioPolicy {
    /// The priority given, always.
    Fifo = 0,
    /// Interactive first: a connection's priority falls (its number rises) as it consumes
    /// tokens, so short transfers overtake long ones.
    Latency = 1,
    /// Servers first: priority rises with the tokens consumed.
    Throughput = 2,
}

impl std::str::FromStr for PrioPolicy {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "fifo" => Ok(PrioPolicy::Fifo),
            "latency" => Ok(PrioPolicy::Latency),
            "throughput" => Ok(PrioPolicy::Throughput),
            _ => Err(ConfigError::Word {
                what: "priority policy",
                text: s.into(),
                expected: "fifo, latency or throughput",
            }),
        }
    }
}

/// What a disk call costs in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum DiskCost {
    /// One token per byte moved, wherever it came from.
    Bytes = 0,
    /// The seed's weights from the measured time per byte: 0 (page-cache hit), 0.1 (disk
    /// cache), 1 (sequential), 5 (seek). Shapes the load on the device, not the bytes.
    Device = 1,
}

impl std::str::FromStr for DiskCost {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "bytes" => Ok(DiskCost::Bytes),
            "device" => Ok(DiskCost::Device),
            _ => Err(ConfigError::Word {
                what: "disk cost",
                text: s.into(),
                expected: "bytes or device",
            }),
        }
    }
}

/// A policy that cannot be applied.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("unknown {what} '{text}': expected {expected}")]
    Word {
        what: &'static str,
        text: String,
        expected: &'static str,
    },
    #[error("{what} '{text}': expected RATE or RATE:BURST (e.g. 10MB/s:64KiB)")]
    Shape { what: &'static str, text: String },
    #[error("priority {0} is out of range: expected 0 (first) to 9 (last)")]
    Priority(u32),
    #[error("{0}: the burst {1} bytes is below one quantum ({2} bytes)")]
    Burst(&'static str, u64, u64),
    #[error("{0}: the peak rate must be at least the rate")]
    Peak(&'static str),
}

/// One budget as stored: rate 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Limit {
    pub rate: u64,
    pub burst: u64,
    pub peak: u64,
    pub kind: u32,
    pub _pad: u32,
}

impl Limit {
    pub const UNLIMITED: Limit = Limit {
        rate: 0,
        burst: 0,
        peak: 0,
        kind: 0,
        _pad: 0,
    };

    /// Read `RATE[:BURST]` for `what` (`net`, `disk`) under `kind`, with `peak` for
    /// token+leaky.
    pub fn parse(
        what: &'static str,
        text: &str,
        kind: Kind,
        peak: Option<&str>,
    ) -> Result<Limit, ConfigError> {
        let mut parts = text.splitn(2, ':');
        let rate = units::parse_rate(parts.next().unwrap_or(""))?;
        let burst = parts.next().map(units::parse_size).transpose()?;
        let Some(rate) = rate else {
            return Ok(Limit::UNLIMITED);
        };
        let q = quantum(rate);
        let burst = match burst {
            Some(b) if b < q => return Err(ConfigError::Burst(what, b, q)),
            Some(b) => b,
            None => default_burst(rate),
        };
        let peak = match (kind, peak) {
            (Kind::TokenLeaky, Some(p)) => match units::parse_rate(p)? {
                Some(p) if p < rate => return Err(ConfigError::Peak(what)),
                Some(p) => p,
                None => 0,
            },
            (Kind::TokenLeaky, None) => rate.saturating_mul(2),
            _ => 0,
        };
        Ok(Limit {
            rate,
            burst,
            peak,
            kind: kind as u32,
            _pad: 0,
        })
    }

    pub fn is_limited(&self) -> bool {
        self.rate > 0
    }

    pub fn kind(&self) -> Kind {
        match self.kind {
            1 => Kind::Leaky,
            2 => Kind::TokenLeaky,
            _ => Kind::Token,
        }
    }

    /// The bucket(s) this limit runs: the first always, the second (leaky at the peak)
    /// for token+leaky.
    pub fn buckets(&self) -> [Option<Params>; 2] {
        if !self.is_limited() {
            return [None, None];
        }
        match self.kind() {
            Kind::Token => [
                Some(Params {
                    rate: self.rate,
                    depth: self.burst,
                }),
                None,
            ],
            Kind::Leaky => [
                Some(Params {
                    rate: self.rate,
                    depth: quantum(self.rate),
                }),
                None,
            ],
            Kind::TokenLeaky => [
                Some(Params {
                    rate: self.rate,
                    depth: self.burst,
                }),
                (self.peak > 0).then(|| Params {
                    rate: self.peak,
                    depth: quantum(self.peak),
                }),
            ],
        }
    }

    pub fn describe(&self) -> String {
        if !self.is_limited() {
            return "unlimited".into();
        }
        let k = match self.kind() {
            Kind::Token => format!("token bucket, burst {} B", self.burst),
            Kind::Leaky => format!("leaky bucket, quantum {} B", quantum(self.rate)),
            Kind::TokenLeaky => format!(
                "token bucket, burst {} B, then leaky at {}",
                self.burst,
                units::show_rate(Some(self.peak))
            ),
        };
        format!("{} ({k})", units::show_rate(Some(self.rate)))
    }
}

/// The smallest useful grant: 2 ms of the rate, at least one full-sized Ethernet frame.
/// A leaky bucket is this deep; a token bucket's burst may not be shallower.
pub fn quantum(rate: u64) -> u64 {
    (rate / 500).max(1500)
}

/// Default burst of a token bucket: 20 ms of the rate, at least 16 KiB. Small enough that
/// a transfer of a few seconds sits within 1% of the rate, deep enough that calls are not
/// cut into crumbs.
pub fn default_burst(rate: u64) -> u64 {
    (rate / 50).max(16 * 1024).max(quantum(rate))
}

/// A whole policy as stored in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Config {
    pub net: Limit,
    pub disk: Limit,
    pub prio_policy: u32,
    pub disk_cost: u32,
}

impl Config {
    pub fn limit(&self, r: Resource) -> &Limit {
        match r {
            Resource::Net => &self.net,
            Resource::Disk => &self.disk,
        }
    }

    pub fn prio_policy(&self) -> PrioPolicy {
        match self.prio_policy {
            1 => PrioPolicy::Latency,
            2 => PrioPolicy::Throughput,
            _ => PrioPolicy::Fifo,
        }
    }

    pub fn disk_cost(&self) -> DiskCost {
        if self.disk_cost == 1 {
            DiskCost::Device
        } else {
            DiskCost::Bytes
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "net {}; disk {} ({} cost); priorities {:?}",
            self.net.describe(),
            self.disk.describe(),
            if self.disk_cost() == DiskCost::Device {
                "device"
            } else {
                "bytes"
            },
            self.prio_policy()
        )
    }
}

impl Config {
    /// This policy changed by `KEY=VALUE` words, as PipesFS' `.shape/NAME` takes them:
    /// `net=RATE[:BURST]`, `disk=RATE[:BURST]` (`unlimited` lifts one), `policy=token|
    /// leaky|token+leaky` and `peak=RATE` (both budgets' bucket kind), `prio-policy=fifo|
    /// latency|throughput`, `disk-cost=bytes|device`.
    pub fn with_edits(&self, text: &str) -> Result<Config, ConfigError> {
        let mut c = *self;
        let mut kind = None;
        let mut peak = None;
        let mut rates: [Option<&str>; 2] = [None, None];
        for w in text.split_whitespace() {
            let (k, v) = w.split_once('=').ok_or_else(|| ConfigError::Word {
                what: "setting",
                text: w.into(),
                expected: "KEY=VALUE (net=, disk=, policy=, peak=, prio-policy=, disk-cost=)",
            })?;
            match k {
                "net" => rates[0] = Some(v),
                "disk" => rates[1] = Some(v),
                "policy" => kind = Some(v.parse::<Kind>()?),
                "peak" => peak = Some(v),
                "prio-policy" | "prio_policy" => c.prio_policy = v.parse::<PrioPolicy>()? as u32,
                "disk-cost" | "disk_cost" => c.disk_cost = v.parse::<DiskCost>()? as u32,
                _ => {
                    return Err(ConfigError::Word {
                        what: "setting",
                        text: k.into(),
                        expected: "net, disk, policy, peak, prio-policy or disk-cost",
                    })
                }
            }
        }
        for (i, (what, old)) in [("net", self.net), ("disk", self.disk)]
            .into_iter()
            .enumerate()
        {
            let k = kind.unwrap_or(old.kind());
            // a new kind or peak re-derives the limit from its rate and burst as they were
            let text = match rates[i] {
                Some(t) => t.to_string(),
                None if old.is_limited() && (kind.is_some() || peak.is_some()) => {
                    format!("{}:{}", old.rate, old.burst)
                }
                None => continue,
            };
            let lim = Limit::parse(what, &text, k, peak)?;
            if i == 0 {
                c.net = lim;
            } else {
                c.disk = lim;
            }
        }
        Ok(c)
    }
}

/// The priority a call runs at: the base priority moved by what its connection or file
/// has consumed (`consumed` tokens since it was opened or accepted), as the policy says.
pub fn effective_priority(policy: PrioPolicy, base: u8, consumed: u64) -> u8 {
    // one step per doubling beyond 16 KiB: 16K 1, 32K 2, 64K 3, ... 4 MiB 9
    let steps = (64 - (consumed / (16 * 1024)).leading_zeros()) as u8;
    let base = base.min(LEVELS as u8 - 1);
    match policy {
        PrioPolicy::Fifo => base,
        PrioPolicy::Latency => base.saturating_add(steps).min(LEVELS as u8 - 1),
        PrioPolicy::Throughput => base.saturating_sub(steps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        let l = Limit::parse("net", "10MB/s", Kind::Token, None).unwrap();
        assert_eq!((l.rate, l.burst), (10_000_000, 200_000));
        let l = Limit::parse("net", "1M:64KiB", Kind::Leaky, None).unwrap();
        assert_eq!(l.buckets()[0].unwrap().depth, 2000);
        let l = Limit::parse("disk", "1M", Kind::TokenLeaky, Some("4M")).unwrap();
        assert_eq!(l.buckets()[1].unwrap().rate, 4_000_000);
        assert_eq!(
            Limit::parse("net", "unlimited", Kind::Token, None).unwrap(),
            Limit::UNLIMITED
        );
        assert!(matches!(
            Limit::parse("net", "1M:100", Kind::Token, None),
            Err(ConfigError::Burst("net", 100, 2000))
        ));
        assert!(matches!(
            Limit::parse("net", "4M", Kind::TokenLeaky, Some("1M")),
            Err(ConfigError::Peak(_))
        ));
        assert!(matches!(
            Limit::parse("net", "4 parsecs", Kind::Token, None),
            Err(ConfigError::Unit(_))
        ));
        assert!("bursty".parse::<Kind>().is_err());
    }

    #[test]
    fn edits_change_only_what_they_name() {
        let c = Config {
            net: Limit::parse("net", "1MB/s", Kind::Token, None).unwrap(),
            ..Default::default()
        };
        let e = c.with_edits("net=5MB/s:64KiB prio-policy=latency").unwrap();
        assert_eq!(
            (e.net.rate, e.net.burst, e.prio_policy()),
            (5_000_000, 65536, PrioPolicy::Latency)
        );
        assert!(!e.disk.is_limited());
        let e = c.with_edits("policy=leaky").unwrap();
        assert_eq!((e.net.rate, e.net.kind()), (1_000_000, Kind::Leaky));
        assert_eq!(c.with_edits("net=unlimited").unwrap().net, Limit::UNLIMITED);
        assert!(c.with_edits("net=5 furlongs").is_err());
        assert!(c
            .with_edits("speed=5M")
            .unwrap_err()
            .to_string()
            .contains("net, disk"));
        assert!(c.with_edits("net").is_err());
    }

    #[test]
    fn priorities_move_with_consumption() {
        assert_eq!(effective_priority(PrioPolicy::Fifo, 3, 1 << 30), 3);
        assert_eq!(effective_priority(PrioPolicy::Latency, 0, 0), 0);
        assert_eq!(effective_priority(PrioPolicy::Latency, 0, 20_000), 1);
        assert_eq!(effective_priority(PrioPolicy::Latency, 0, 1 << 30), 9);
        assert_eq!(effective_priority(PrioPolicy::Throughput, 9, 0), 9);
        assert_eq!(effective_priority(PrioPolicy::Throughput, 9, 1 << 30), 0);
    }
}
