//! `streamline-worker __worker --fd N`: one run of the daemon. The daemon starts it
//! (`daemon::spawn`) with the client's identity, the client's standard streams and a
//! socket pair; over the socket it learns the run's graph as the daemon checked it (typed,
//! with the text for messages) and the client's context, derives and builds the run from
//! that graph (`runplan::plan_checked`, no parse), reports the build's verdict, waits for `go`, runs,
//! sends the counters now and then, applies live edits and taps, and reports the exit
//! status. `streamline-worker __space --space ID --fd N` is one of its run's process
//! spaces (`runplan::process_space`).
//!
//! Owns: checking that it runs with its client's identity and nothing more
//! ([`identity`]), and the worker's side of the protocol
//! (`daemon::proto::{ToWorker, FromWorker}`: [`control`], [`report`]). Links the plan
//! library and the dataplane, never the `streamline` command.

mod control;
mod identity;
mod report;

use daemon::proto::{self, FromWorker, Msg};
use daemon::ToWorker;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1)?.parse::<i64>().ok()
    };
    match (args.first().map(String::as_str), arg("--fd")) {
        (Some("__worker"), Some(fd)) => worker(fd as i32),
        (Some("__space"), Some(fd)) => match arg("--space") {
            Some(space) => ExitCode::from(runplan::process_space(space as usize, fd as i32)),
            None => usage(),
        },
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("streamline-worker: error: usage: streamline-worker __worker --fd N | __space --space ID --fd N (this program is started by streamlined)");
    ExitCode::from(2)
}

/// The worker's socket to the daemon, shared by its threads; every message names the run.
#[derive(Clone)]
pub struct Out {
    sock: Arc<Mutex<UnixStream>>,
    run: u64,
}

impl Out {
    pub fn tell(&self, m: FromWorker) -> Result<(), proto::ProtoError> {
        self.send(m, &[])
    }

    pub fn send(&self, m: FromWorker, fds: &[i32]) -> Result<(), proto::ProtoError> {
        let s = self.sock.lock().expect("not poisoned");
        proto::send(
            &s,
            &Msg {
                id: self.run,
                body: m,
            },
            fds,
        )
    }

    fn failed(&self, message: String, errno: i32) {
        let _ = self.tell(FromWorker::Failed { message, errno });
    }
}

/// A `start` the worker cannot take: refused to the daemon (EPROTO) and on its stderr.
fn refuse_start(sock: UnixStream, why: String) -> ExitCode {
    let why = runplan::report::error_text(&format!("worker: {why}"));
    eprintln!("{why}");
    let out = Out {
        sock: Arc::new(Mutex::new(sock)),
        run: 0,
    };
    out.failed(why, libc::EPROTO);
    ExitCode::from(2)
}

fn worker(fd: i32) -> ExitCode {
    runplan::report::ignore_stop_signals();
    // No PR_SET_PDEATHSIG: it fires when the daemon's *thread* that started us ends (the
    // client's connection), not the daemon. When the daemon dies, our socket closes and
    // the control thread stops the run as a hang-up would, cleaning up as it goes.
    let sock = match beltway::sys::inherited_unix_stream(fd) {
        Ok(s) => s,
        Err(e) => {
            let why =
                format!("worker: descriptor {fd}: {e} (this command is started by streamlined)");
            eprintln!("{}", runplan::report::error_text(&why));
            return ExitCode::from(2);
        }
    };
    let (start, mut fds) = match proto::recv::<ToWorker>(&sock) {
        Ok((
            Msg {
                body: start @ ToWorker::Start { .. },
                ..
            },
            fds,
        )) => (start, fds),
        Ok(_) => return refuse_start(sock, "the daemon's first message is not `start`".into()),
        // A value that does not decode (an unknown field, a wrong type, a frame too big):
        // said, not just died of.
        Err(e) => return refuse_start(sock, format!("the daemon's `start` does not decode: {e}")),
    };
    let ToWorker::Start {
        run,
        pipeline,
        graph,
        options,
        uid,
        gid,
        groups,
        modes,
        lent,
        context,
    } = start
    else {
        unreachable!("matched above")
    };
    let out = Out {
        sock: Arc::new(Mutex::new(
            sock.try_clone().expect("clone the daemon's socket"),
        )),
        run,
    };
    if let Err(e) =
        identity::assume(uid, gid, &groups).and_then(|()| identity::take_lent(uid, lent.clone()))
    {
        out.failed(
            format!("streamline: the worker of uid {uid} refuses to run: {e}"),
            libc::EPERM,
        );
        return ExitCode::from(1);
    }
    if let Err(e) = daemon::context::take(&context, fds.pop(), uid) {
        out.failed(format!("streamline: the client's context: {e}"), e.errno());
        return ExitCode::from(1);
    }
    // The graph the daemon checked, derived from as it is (the nodes the sockets were lent
    // for checked against it): the text is for messages only.
    let lent: Vec<(usize, &str)> = lent.iter().map(|l| (l.node, l.kind.as_str())).collect();
    let built = runplan::plan_checked(graph, &pipeline, &options, &modes, &lent)
        .and_then(|p| Ok((p.build()?, p)));
    let (spaces, plan) = match built {
        Ok(b) => b,
        Err(e) => {
            out.failed(e.message, libc::EINVAL);
            return ExitCode::from(e.code);
        }
    };
    let (placement, layout) = (plan.placement.clone(), plan.layout_text.clone());
    if out
        .tell(FromWorker::Built {
            placement: placement.clone(),
            layout,
        })
        .is_err()
    {
        return ExitCode::from(1);
    }
    // The transaction's end: `go` commits; `stop` (or the daemon going away) rolls the
    // built run back (dropping it undoes every construction step).
    if !matches!(
        proto::recv::<ToWorker>(&sock),
        Ok((
            Msg {
                body: ToWorker::Go {},
                ..
            },
            _
        ))
    ) {
        drop(spaces);
        filters::nicfix::remove_run_pins();
        return ExitCode::SUCCESS;
    }
    if !options.quiet && !placement.is_empty() {
        eprintln!("{placement}");
    }
    let code = control::run(sock, out, spaces, &options, plan.mode, &modes);
    ExitCode::from(code)
}
