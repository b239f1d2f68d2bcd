//! `streamline help TOPIC`: the topics that are not one command's options. `pipelines`
//! teaches the language (its examples run from the repository root on
//! examples/sample.pcap; tests/help.rs runs every `  $ ` line and checks the lines shown
//! under it), `options` lists the control options and hints every filter takes (their one
//! home: `catalog::control_options_doc`, re-exported by `dataplane::decl`), `policy` is
//! the daemon's policy file (`daemon::policy::FORMAT`, whose example the daemon's tests
//! parse).
//!
//! The source of truth for the syntax is the `lang` crate (its module documentation) and
//! ARCHITECTURE.md, "A pipeline, from text to results".

/// The topics, with a line each (`streamline help` lists them after the commands).
pub const TOPICS: &[(&str, &str)] = &[
    ("pipelines", "the pipeline language, with examples to run"),
    (
        "options",
        "the control options and @hints every filter takes",
    ),
    (
        "policy",
        "the daemon's policy file (streamlined --policy FILE)",
    ),
];

/// The topics as `streamline --help` lists them after the commands.
pub fn topics_text() -> String {
    let mut s = String::from("Help topics (streamline help TOPIC):");
    for (name, what) in TOPICS {
        s += &format!("\n  {name:<10} {what}");
    }
    s
}

/// The text of a topic, if it is one.
pub fn topic(name: &str) -> Option<String> {
    match name {
        "pipelines" | "pipeline" | "language" => Some(PIPELINES.to_string()),
        "options" | "hints" => Some(dataplane::decl::control_options_doc()),
        "policy" => Some(daemon::policy::FORMAT.to_string()),
        _ => None,
    }
}

/// `streamline help pipelines`. Conventions the test relies on: a line starting with
/// `  $ ` is a command run as written (bash, from the repository root); the lines right
/// under it indented by 4 spaces are lines it prints (standard output or error).
pub const PIPELINES: &str = r#"THE PIPELINE LANGUAGE

A pipeline is filters joined by `|`, as in the shell: blocks (packets, lines, file
chunks) flow from the sources on the left to the sinks on the right. Each filter
reads its input, passes some blocks on and may set each block's class (a number,
e.g. the destination port). Every example below runs as written from the
repository root (examples/sample.pcap is a capture of 5,247 packets).

FILTERS AND PARAMETERS

A word is a native filter (`streamline filters` lists them, `streamline filters
NAME` documents one) or else a Unix command, as the shell runs it. Parameters are
positional or key=value; `streamline filters NAME` says which. A command that is not
on PATH fails as in the shell: `NAME: command not found` on standard error, exit
status 127, the rest of the pipeline runs (`nosuchcmd | wc -l` prints 0); only a
near miss of a native filter's name with no program of that name (`cuont`) is
refused before anything runs, with the filter it meant.

  $ streamline run 'pcapin file=examples/sample.pcap | count'
    count: 5247 blocks, 4254132 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | ip 4 | tcp | count'
    count: 3481 blocks, 2742397 bytes

A plain shell pipeline gives the shell's output: a native filter that shares a Unix
tool's name (grep, file, split, join, strip, ip, hash) means the tool when a plain
`|` joins it to a Unix command, or when it is the whole pipeline. Every word after a
Unix command's name is its argument, as bash gives it (quotes and backslashes as
bash reads them; key=value words too: `echo name=x` prints name=x). Streamline's
own options for the command follow an `@`, like hints: `gzip -c @space=1,2` places
it, `wc -l @name=w` names it (native filters take `@space=` and `@name=` too). Beside
native filters or operators, `space=` or `name=` after a Unix command is refused
(write `@space=` to place it, quote the word to pass it). A shell builtin with no
program on PATH (read, cd, eval, type, ulimit, hash, :, ...) runs in bash; the
first command reads the run's standard input. Shell syntax that would redirect,
sequence, glob or expand (`<`, `>`, `;`, `&&`, `*`, `$`, `~`, `{a,b}`, `<(...)`) is
refused with a caret under it and the `bash -c` spelling; so is `+`, `*` or `&` right
beside a Unix command (`echo 1 + 2`: a word to the shell), and `!` before one (the
shell negates its exit status): put branches of Unix commands in parentheses,
`(gzip -c) + (bzip2 -c)`. After a Unix command, a program's name glued to `|` is the
command piped into, as in the shell (`seq 10|wc -l`); elsewhere `|name` is a selector.

  $ streamline run 'printf "a\nb\na\n" | grep a | wc -l'
    2
  $ streamline run 'seq 1 200000 | grep 7 | tr -d "\n" | wc -c'
    446731
  $ streamline run 'echo name=x space=1 | wc -c'
    15
  $ streamline run 'nosuchcmd | wc -l'
    0
    streamline: nosuchcmd: command not found
  $ streamline run 'seq 1 100000 | gzip -1 @space=1 | gzip -dc | wc -l'
    100000

COUNTS AND SIZES

Where a count or size is read (gen count=, size=, rate=, --ring, max_ring), the
suffixes K, M and G are binary: 2K = 2,048, 1K = 1,024 bytes, 20M = 20,971,520.

  $ streamline run 'gen count=2K size=1K | count'
    count: 2048 blocks, 2097152 bytes
  $ streamline run 'gen count=20M size=64 | count'
    count: 20971520 blocks, 1342177280 bytes

`gen rate=N` offers N blocks per second, each made when its time comes (a fixed
offered load; without rate= it makes them as fast as it can):

  $ streamline run 'gen count=2000 rate=10K | count'
    count: 2000 blocks, 2048000 bytes

SELECTORS: WHICH BLOCKS AN ARC TAKES

A selector is glued to its `|` and admits only blocks of some classes: `|53` the
class 53, `|1:1023` a range, `|!X` everything but X, `|name` a class by the name the
nearest filter upstream publishes (`streamline filters dport` lists dport's:
http = 80, dns = 53, ...). A plain `|` takes every block the filter passes.

  $ streamline run 'pcapin file=examples/sample.pcap | dport |53 count'
    count: 48 blocks, 4532 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | dport |dns count'
    count: 48 blocks, 4532 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | dport |1:1023 count'
    count: 767 blocks, 156227 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | dport |!1:1023 count'
    count: 4480 blocks, 4097905 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | tcp | dport |http count'
    count: 519 blocks, 117834 bytes

A name no filter upstream publishes is an error under the selector, listing the
names upstream has. `a|b` (no space) reads b as a class name.

PARALLEL BRANCHES: + ++ +* AND !

`A + B` sends every block to both branches and joins what they pass, duplicates
kept (Or, with copies); `A ++ B` passes the first copy of each block (Or);
`A +* B` passes a block only when every branch passed it (And). `!A | B` passes
what A drops. Different operators in one chain need parentheses:
`(a + b) ++ c`.

  $ streamline run 'pcapin file=examples/sample.pcap | tcp + udp | count'
    count: 5166 blocks, 4218484 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | tcp ++ ip | count'
    count: 5245 blocks, 4254048 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | ip +* tcp | count'
    count: 4565 blocks, 3786573 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | !tcp | count'
    count: 682 blocks, 467559 bytes

A join keeps each block's class: after `A + B`, a block carries the class the filter
of its branch gave it, so `hist` (and a selector) tells the branches apart where their
filters classify differently. tcp and udp classify by IP protocol number (6 and 17,
as `proto` does, and publish the names tcp and udp); their shares are tcpdump's
counts of `tcp` (4,565 packets) and `udp` (601) in the sample:

  $ streamline run 'pcapin file=examples/sample.pcap | tcp + udp | hist'
    hist: 5166 blocks
    class        6:       4565 (88.4%)
    class       17:        601 (11.6%)
  $ streamline run 'pcapin file=examples/sample.pcap | tcp + udp |udp count'
    count: 601 blocks, 431911 bytes

NAMED NODES AND LOOPS

`name=X` names a node: every occurrence of the name is that one node, so two
branches can feed one filter. A loop goes back to a named node and must pass a
`for` filter, which bounds it: `for name=L N | body | for name=L |! after` runs
body N times per block (class 1 while iterations remain), then `|!` lets it out.

  $ streamline run 'pcapin file=examples/sample.pcap | (tcp | count name=c) + (udp | count name=c) | null'
    count: 5166 blocks, 4218484 bytes
  $ streamline run 'gen count=5 | for name=L 3 | count | for name=L |! null'
    count: 15 blocks, 15360 bytes

WHERE FILTERS RUN: space= AND @hints

By default the planner places filters (`streamline plan 'PIPELINE'` explains its
choice; `run --plan none` runs them as written). `space=N` (on a Unix command
`@space=N`, its words being all its own) puts a filter on a
worker thread pinned to CPU N, `space=pN` in a process of its own, `space=local` in
the calling thread; a filter without space= runs where its first input runs.
`space=A,B` replicates a filter, one copy per space, and keeps the order. The
results are the same in every placement (a placement that would change them is
refused, naming the filter), and so is the table at the end: one row per filter you
wrote, labelled as in one space (count, count#2), its last column the spaces it ran
in (a replicated filter's row sums its copies: space 1,2).

  $ streamline run 'pcapin file=examples/sample.pcap | tcp space=1 | count'
    count: 4565 blocks, 3786573 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | ip | tcp space=p1 | count'
    count: 4565 blocks, 3786573 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | tcp space=1,2 | count'
    count: 4565 blocks, 3786573 bytes

`@hint` after a filter (or after a parenthesized group: on every filter in it) says
how it should be scheduled: @private (a process of its own), @background,
@realtime, @hrealtime (a thread of its own), @latency (woken for every block),
@throughput (large batches), @lockstep (the channel into it is a queue of 4
batches polled by its consumer: an assembly line whose stations stay a few
batches apart), @single (never replicated), @quiet, @busy. `streamline help
options` lists the control options and hints every filter takes.

  $ streamline run 'pcapin file=examples/sample.pcap | tcp @private | count'
    count: 4565 blocks, 3786573 bytes
  $ streamline run 'pcapin file=examples/sample.pcap | eth | ip | tcp space=1 @lockstep | count'
    count: 4565 blocks, 3786573 bytes
  $ streamline run 'gen count=2000 rate=10K | count space=1 @latency'
    count: 2000 blocks, 2048000 bytes

CHECKING A PIPELINE

`streamline check 'PIPELINE'` prints the graph it parses to (nodes, arcs and their
selectors) or the error with a caret under its place; `streamline plan` shows
where each filter would run and why.

  $ streamline check 'pcapin file=examples/sample.pcap | dport |!1:1023 count'
    n1 -> n2 |!1:1023
"#;
