//! The optimizer against the push-down heuristic (thesis 6.3.2, 7.4), errors for
//! impossible and infeasible requests, template substitution, and the property that the
//! ILP never costs more than the heuristic.

mod common;

use control::model::{request_from_text, Catalog, Load};
use control::optimize::{cost, ilp, push_down};
use control::planner::Method;
use control::{Channel, Planner, SpaceKind};
use proptest::prelude::*;

fn planner(system: &str) -> Planner {
    Planner::new(common::system(system), common::filters())
}

#[test]
fn optimizer_matches_push_down_on_packet_filters() {
    let p = planner("dual");
    for pipe in [
        "rx | bpf \"tcp\" | null",
        "rx | bpf \"tcp\" | ip | tcp | null",
        "rx | bpf \"udp\" | dns | stdout",
        // (A `sample` after the bpf has no kernel form: a socket runs one program.)
        "rx | bpf \"port 53\" | dns | sample 10 | null",
    ] {
        let a = p.plan(pipe, Method::Optimal).unwrap().plan;
        let b = p.plan(pipe, Method::Heuristic).unwrap().plan;
        assert_eq!(a.canonical(), b.canonical(), "{pipe}");
        // The filter is pushed down into the kernel, next to the source.
        assert_eq!(a.nodes[1].space_kind, SpaceKind::Kernel, "{pipe}");
        assert_eq!(a.nodes[1].implementation, "cbpf-socket");
    }
}

#[test]
fn optimizer_beats_push_down_on_the_four_stage_example() {
    // Stages 1 and 3 can run in the kernel, 2 and 4 only in user space.
    let p = planner("dual");
    let pipe = "rx | grep x | count | null";
    let a = p.plan(pipe, Method::Optimal).unwrap().plan;
    let b = p.plan(pipe, Method::Heuristic).unwrap().plan;
    assert_eq!(
        b.nodes[2].space_kind,
        SpaceKind::Kernel,
        "push-down sends count back into the kernel"
    );
    let crossings = |pl: &control::Plan| {
        pl.streams
            .iter()
            .filter(|s| matches!(s.channel, Channel::KernelToUser | Channel::UserToKernel))
            .count()
    };
    assert_eq!(crossings(&b), 3);
    assert_eq!(crossings(&a), 1);
    assert!(a.cost < b.cost, "ilp {} vs heuristic {}", a.cost, b.cost);
}

#[test]
fn kernel_bpf_is_cheaper_than_user_bpf() {
    // Thesis 7.4: without BPF in the kernel, the plan costs markedly more.
    let p = planner("dual");
    let k = p
        .plan("rx | bpf \"tcp\" | null", Method::Optimal)
        .unwrap()
        .plan;
    let u = p
        .plan("rx | bpf \"tcp\" space=user | null", Method::Optimal)
        .unwrap()
        .plan;
    assert_eq!(u.nodes[1].implementation, "cbpf-interp");
    assert!(u.cost > 1.3 * k.cost, "user {} kernel {}", u.cost, k.cost);
}

#[test]
fn impossible_pins_name_the_filter_and_why() {
    let p = planner("dual");
    let e = p
        .plan("rx | grep x space=kernel | null", Method::Optimal)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("grep x") && e.contains("pinned to space=kernel") && e.contains("thread"),
        "{e}"
    );
    let e = p
        .plan("rx | bpf \"tcp\" space=thread:7 | null", Method::Optimal)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cpu7"), "{e}");
    let e = p
        .plan("rx | cuont", Method::Optimal)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cuont"), "{e}");
}

#[test]
fn a_machine_without_af_packet_cannot_receive() {
    let mut sys = common::system("dual");
    sys.caps.af_packet = false;
    let p = Planner::new(sys, common::filters());
    let e = p
        .plan("rx | null", Method::Optimal)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("rx") && e.contains("AfPacket"), "{e}");
}

#[test]
fn infeasible_capacity_names_the_filter() {
    let mut p = planner("dual");
    p.load = Load {
        blocks_per_sec: 1_000_000.0,
        bytes_per_block: 1500.0,
    };
    // Pinned to one CPU, even the data-parallel template cannot help.
    let e = p
        .plan("rx | deflate space=thread:0 | null", Method::Optimal)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("deflate") && e.contains("more than one CPU"),
        "{e}"
    );
}

#[test]
fn template_substitution_parallelizes_a_filter_too_heavy_for_one_cpu() {
    let mut p = planner("quad");
    p.load = Load {
        blocks_per_sec: 1_000_000.0,
        bytes_per_block: 500.0,
    };
    let r = p.plan("rx | deflate | null", Method::Optimal).unwrap();
    assert!(
        r.plan.stats.alternative.contains("data-parallel"),
        "{}",
        r.plan.stats.alternative
    );
    let deflates: Vec<_> = r
        .plan
        .nodes
        .iter()
        .filter(|n| n.label == "deflate")
        .collect();
    assert!(deflates.len() >= 2);
    let mut cpus: Vec<usize> = deflates.iter().map(|n| n.cpu).collect();
    cpus.sort();
    cpus.dedup();
    assert_eq!(cpus.len(), deflates.len(), "copies on distinct CPUs");
    for (_, load) in &r.plan.cpu_load {
        assert!(*load <= r.plan.capacity);
    }
}

#[test]
fn plan_is_consistent_and_prints() {
    let p = planner("quad");
    let r = p
        .plan("rx | bpf \"tcp\" | grep x | null", Method::Optimal)
        .unwrap();
    let plan = &r.plan;
    assert!(plan.stats.variables > 0 && plan.stats.constraints > 0);
    // (That the plan is the model's cheapest is ilp_finds_the_cheapest_placement_of_all.)
    let text = plan.explain();
    assert!(
        text.contains("variables") && text.contains("cbpf-socket"),
        "{text}"
    );
    let dot = plan.dot();
    assert!(
        dot.starts_with("digraph plan {") && dot.contains("cluster_") && dot.contains("n0 -> n1"),
        "{dot}"
    );
}

#[test]
fn co_location_grows_with_rate() {
    // At a low rate everything fits one CPU; at a high rate the plan spreads over CPUs.
    let mut p = planner("quad");
    let pipe = "gen | deflate | xor 7 | encrypt | null";
    p.load = Load {
        blocks_per_sec: 10_000.0,
        bytes_per_block: 500.0,
    };
    let low = p.plan(pipe, Method::Optimal).unwrap().plan;
    p.load = Load {
        blocks_per_sec: 400_000.0,
        bytes_per_block: 500.0,
    };
    let high = p.plan(pipe, Method::Optimal).unwrap().plan;
    let used = |pl: &control::Plan| pl.cpu_load.iter().filter(|(_, l)| *l > 0.0).count();
    assert_eq!(used(&low), 1);
    assert!(used(&high) > 1);
}

const MIDDLE: [&str; 12] = [
    "bpf \"tcp\"",
    "ip",
    "tcp",
    "grep x",
    "count",
    "sample 4",
    "strip",
    "deflate",
    "xor 7",
    "dedup",
    "bpf sel=0.5",
    "encrypt",
];

/// `SOURCE | MIDDLE[m] | ... | null`: the random pipelines of the properties below.
fn pipeline_text(source: &str, mids: &[usize]) -> String {
    let mut text = source.to_string();
    for m in mids {
        text += " | ";
        text += MIDDLE[*m];
    }
    text + " | null"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn ilp_is_never_worse_than_push_down(
        mids in proptest::collection::vec(0..MIDDLE.len(), 1..6),
        system in prop::sample::select(vec!["dual", "quad", "dual_threads_only", "numa4"]),
        rate in prop::sample::select(vec![1_000.0, 100_000.0, 600_000.0]),
        source in prop::sample::select(vec!["rx", "gen"]),
    ) {
        let text = pipeline_text(source, &mids);
        let sys = common::system(system);
        let (_, req) = request_from_text(&text, &Catalog::new(common::filters()), Load { blocks_per_sec: rate, bytes_per_block: 500.0 }).unwrap();
        match push_down(&req, &sys) {
            Ok((h, _)) => {
                let (o, _) = ilp(&req, &sys, 30.0).unwrap();
                let (co, ch) = (cost(&req, &sys, &o), cost(&req, &sys, &h));
                // Equal up to the optimizer's tie-break (under one cycle per second in total).
                prop_assert!(co <= ch + 1.0, "{text} on {system}: ilp {co} > heuristic {ch}");
            }
            // The heuristic found nothing: the ILP proves that nothing fits, or returns a
            // plan that fits every CPU by this test's own load sum (the greedy order may
            // miss what the ILP finds: `rx | sample 4 | deflate | deflate | null` at
            // 600k blocks/s on the dual system; a plan overloading a CPU is an ILP bug).
            Err(e) => {
                prop_assert!(matches!(e, control::PlanError::Infeasible(_)), "{text} on {system}: {e}");
                match ilp(&req, &sys, 30.0) {
                    Err(control::PlanError::Infeasible(_)) => {}
                    Err(e) => prop_assert!(false, "{text} on {system}: {e}"),
                    Ok((o, _)) => {
                        let mut load = std::collections::HashMap::<usize, f64>::new();
                        for (i, c) in o.iter().enumerate() {
                            *load.entry(sys.spaces[c.space].cpu).or_default() += req.node_cycles(i, c.imp);
                        }
                        for (cpu, l) in load {
                            prop_assert!(l <= sys.cycles_per_sec * (1.0 + 1e-9), "{text} on {system}: the ILP loads CPU {cpu} with {l:.3e} cycles/s of {:.3e}", sys.cycles_per_sec);
                        }
                    }
                }
            }
        }
    }
}

/// The cheapest placement by enumeration: every combination of each filter's admissible
/// choices (implementation and space), costed by the model (`plan::evaluate`), kept if it
/// fits every CPU (and the link). None when nothing fits; also how many were tried.
fn cheapest_by_enumeration(
    req: &control::model::Request,
    sys: &control::SystemModel,
) -> (Option<f64>, usize) {
    let opts = control::optimize::options(req, sys).unwrap();
    let mut pick = vec![0usize; opts.len()];
    let (mut best, mut tried) = (None::<f64>, 0usize);
    loop {
        let choice: Vec<control::Choice> = pick.iter().zip(&opts).map(|(&k, o)| o[k]).collect();
        let c = control::plan::evaluate(req, sys, &choice);
        tried += 1;
        if c.fits(sys) && best.is_none_or(|b| c.total < b) {
            best = Some(c.total);
        }
        // The next combination (an odometer over the options).
        let mut i = 0;
        loop {
            if i == pick.len() {
                return (best, tried);
            }
            pick[i] += 1;
            if pick[i] < opts[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// On graphs small enough to enumerate, the ILP's plan costs what the cheapest of all
    /// fitting placements costs (up to its tie-break, under one cycle per second), and it
    /// says infeasible exactly when no placement fits.
    #[test]
    fn ilp_finds_the_cheapest_placement_of_all(
        mids in proptest::collection::vec(0..MIDDLE.len(), 1..4),
        system in prop::sample::select(vec!["dual", "dual_threads_only", "quad"]),
        rate in prop::sample::select(vec![1_000.0, 300_000.0, 900_000.0]),
        source in prop::sample::select(vec!["rx", "gen"]),
    ) {
        let text = pipeline_text(source, &mids);
        let sys = common::system(system);
        let (_, req) = request_from_text(&text, &Catalog::new(common::filters()), Load { blocks_per_sec: rate, bytes_per_block: 500.0 }).unwrap();
        let (truth, tried) = cheapest_by_enumeration(&req, &sys);
        prop_assert!(tried > 1, "{text} on {system}: {tried} placements");
        match (truth, ilp(&req, &sys, 30.0)) {
            (None, Err(control::PlanError::Infeasible(_))) => {}
            (None, r) => prop_assert!(false, "{text} on {system}: none of {tried} placements fits, the ILP says {:?}", r.map(|(c, _)| c)),
            (Some(t), Err(e)) => prop_assert!(false, "{text} on {system}: the cheapest of {tried} placements costs {t:.6e}, the ILP says {e}"),
            (Some(t), Ok((o, _))) => {
                let c = control::plan::evaluate(&req, &sys, &o);
                prop_assert!(c.fits(&sys), "{text} on {system}: the ILP's plan does not fit");
                prop_assert!(c.total <= t + 1.0, "{text} on {system}: ilp {:.6e}, cheapest of {tried} placements {t:.6e}", c.total);
            }
        }
    }
}

/// Two hosts of one CPU each and a link (`tests/golden/systems/twohost.json`): a pipeline
/// too heavy for one host is split across the link, at the one cut that fits both hosts'
/// CPUs; the link's bandwidth is a constraint (too narrow a link makes every split
/// infeasible, said with the link named), and its per-byte cost steers the cut to the
/// thinner stream.
#[test]
fn two_hosts_split_a_pipeline_across_the_link_within_its_bandwidth() {
    let mut p = planner("twohost");
    p.load = Load {
        blocks_per_sec: 700_000.0,
        bytes_per_block: 500.0,
    };
    // gen 420M + grep 609M on one host, deflate 1.5G + null on the other: the only cut
    // that fits is after grep (which passes half the blocks).
    let pipe = "gen | grep x | deflate | null";
    let r = p.plan(pipe, Method::Optimal).unwrap().plan;
    let net: Vec<_> = r
        .streams
        .iter()
        .filter(|s| s.channel == Channel::Network)
        .collect();
    assert_eq!(net.len(), 1, "{}", r.explain());
    assert_eq!((net[0].from, net[0].to), (1, 2), "{}", r.explain());
    let (load, bw) = r.link.expect("a two-host plan reports its link");
    assert!(
        (load - net[0].bytes).abs() < 1.0 && load <= bw,
        "{}",
        r.explain()
    );
    assert!(r.canonical().contains(" on a\n") && r.canonical().contains(" on b\n"));
    assert!(
        r.explain().contains("link between the hosts"),
        "{}",
        r.explain()
    );

    // A link narrower than the thinnest feasible cut: no plan, and the error says why.
    let mut sys = common::system("twohost");
    sys.link.as_mut().unwrap().bandwidth = 100e6;
    let mut narrow = Planner::new(sys, common::filters());
    narrow.load = p.load;
    let e = narrow
        .plan(pipe, Method::Optimal)
        .err()
        .expect("infeasible")
        .to_string();
    assert!(e.contains("link"), "{e}");

    // At a rate one host carries alone, nothing crosses (crossing costs cycles).
    p.load.blocks_per_sec = 100_000.0;
    let r = p.plan(pipe, Method::Optimal).unwrap().plan;
    assert!(
        r.streams.iter().all(|s| s.channel != Channel::Network),
        "{}",
        r.explain()
    );
}

#[test]
fn a_two_host_model_is_checked() {
    let base = common::system("twohost");
    let bad = |f: &dyn Fn(&mut control::SystemModel), want: &str| {
        let mut m = base.clone();
        f(&mut m);
        let e = control::SystemModel::from_json(&m.to_json())
            .err()
            .expect(want)
            .to_string();
        assert!(e.contains(want), "{e}");
    };
    bad(&|m| m.link = None, "no link");
    bad(&|m| m.hosts[1].cpus = vec![0], "cpu 0 is on 2 hosts");
    bad(
        &|m| m.link.as_mut().unwrap().b = "c".into(),
        "the link joins",
    );
    bad(
        &|m| m.link.as_mut().unwrap().bandwidth = 0.0,
        "positive bandwidth",
    );
    bad(&|m| m.hosts.truncate(1), "1 hosts");
    // The one-host models do not mention hosts at all (their JSON is unchanged).
    assert!(!common::system("dual").to_json().contains("hosts"));
}
