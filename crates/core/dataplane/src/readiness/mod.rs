//! How a space waits: one readiness handle per space instead of a timed wait per source.
//!
//! A space's loop pulls its sources without blocking. When a round of the loop found
//! nothing, it asks each source (and each filter that makes blocks on its own, a Unix
//! process in the middle of a pipeline) what it waits for ([`crate::Filter::arm`]): file
//! descriptors that become readable (a socket, a capture ring, standard input), wake-up
//! signals (a channel's eventfd, which the producing space signals when it wakes its
//! readers, per the ring's moderation: batched wake-ups stay batched), peers' pidfds
//! (liveness: a process space that dies makes its pidfd readable), a deadline, or "ready
//! now". Then the space sleeps once, on one epoll set holding all of them, the space's own
//! waker (edits, stop; [`Waker`]) and one timerfd for the nearest deadline.
//!
//! A source that declares nothing ([`Arm::poll`], the default) waits inside its own
//! `pull`, as every source did before this module: the space then does not sleep here.
//!
//! Owns: the epoll set, its registrations, the timer, the space's waker and the
//! process-wide list of wakers a stop signal rings. Does not own: the sleep/wake handshake
//! with a ring's producer (`beltway::Reader::arm`), nor what a source reads.

mod sys;

use beltway::sys::EventFd;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What the sources of a space wait for, gathered before it sleeps ([`crate::Filter::arm`]).
pub struct Arm<'a> {
    fds: &'a mut Vec<(RawFd, bool)>,
    fired: &'a [RawFd],
    ready: bool,
    poll: bool,
    deadline: Option<Instant>,
}

impl Arm<'_> {
    /// Wake when `fd` is readable (level: as long as something is there to read; a
    /// socket, a capture ring, a pipe, a pidfd). The descriptor must stay open while it is
    /// declared.
    pub fn fd(&mut self, fd: BorrowedFd<'_>) {
        self.fds.push((fd.as_raw_fd(), false));
    }

    /// Wake when `fd` is signalled (edge: each signal wakes once; an eventfd nobody
    /// reads, such as a channel's wake-up).
    pub fn signal(&mut self, fd: BorrowedFd<'_>) {
        self.fds.push((fd.as_raw_fd(), true));
    }

    /// Something is there now: do not sleep.
    pub fn ready(&mut self) {
        self.ready = true;
    }

    /// Wake at `at` at the latest (a latency bound, a gather, a linger).
    pub fn deadline(&mut self, at: Instant) {
        self.deadline = Some(self.deadline.map_or(at, |d| d.min(at)));
    }

    /// This source declares nothing: it waits in its own `pull` (the space does not sleep).
    pub fn poll(&mut self) {
        self.poll = true;
    }

    /// Whether `fd` was among the descriptors that ended the last sleep.
    pub fn fired(&self, fd: BorrowedFd<'_>) -> bool {
        self.fired.contains(&fd.as_raw_fd())
    }
}

/// Whether `fd` can be read without waiting now (data, the end, or an error to report):
/// for a source that reads a descriptor it must not make non-blocking (standard input is
/// shared with the shell that started the run), so that `pull` never waits.
pub fn readable_now(fd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) => n > 0,
        // Cannot be polled: read it (a regular file never waits).
        Err(_) => true,
    }
}

/// What a round of arming decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Some source has data, or waits by itself: loop again at once.
    Run,
    /// Sleep on the handle.
    Sleep,
}

/// Wakes a space that sleeps on its readiness handle (an edit arrived, the run stops).
#[derive(Clone, Debug)]
pub struct Waker(Arc<EventFd>);

impl Waker {
    pub fn wake(&self) {
        self.0.signal();
    }
}

/// A wake-up signal a source hands to whatever fills it from another thread (a library's
/// callback, a reading thread): that side calls [`Signal::signal`], the source declares it
/// with [`Arm::signal`]. Clones share the signal.
#[derive(Clone, Debug)]
pub struct Signal(Arc<EventFd>);

impl Signal {
    pub fn new() -> std::io::Result<Signal> {
        Ok(Signal(Arc::new(EventFd::new()?)))
    }

    pub fn signal(&self) {
        self.0.signal();
    }
}

impl AsFd for Signal {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The wakers of the spaces of this process, rung when the run is interrupted.
static SPACES: Mutex<Vec<Weak<EventFd>>> = Mutex::new(Vec::new());

/// Wake every space of this process that sleeps (a stop signal, an interrupt): each
/// looks at its interrupt flag at once instead of at its next tick.
pub fn wake_all_spaces() {
    let mut v = SPACES.lock().unwrap_or_else(|e| e.into_inner());
    v.retain(|w| match w.upgrade() {
        Some(e) => {
            e.signal();
            true
        }
        None => false,
    });
}

/// A thread outside the spaces that waits for the run to stop (the one that tells
/// process spaces to stop): rung by [`wake_all_spaces`] like a space, and by [`StopWaiter::ring`]
/// for its own news, instead of looking every few milliseconds.
pub struct StopWaiter(Arc<EventFd>);

impl StopWaiter {
    pub fn new() -> std::io::Result<StopWaiter> {
        let e = Arc::new(EventFd::new()?);
        SPACES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&e));
        Ok(StopWaiter(e))
    }

    pub fn ring(&self) {
        self.0.signal();
    }

    /// Until rung, or `limit` passed.
    pub fn wait(&self, limit: Duration) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let ms = limit.as_millis().min(u16::MAX as u128) as u16;
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(ms));
        self.0.drain();
    }
}

/// One space's readiness handle: an epoll set, its timerfd and its waker.
pub struct Readiness {
    ep: Epoll,
    timer: TimerFd,
    /// The deadline the timer is set to (none: disarmed).
    timer_at: Option<Instant>,
    waker: Arc<EventFd>,
    /// Registered in the set now (besides the timer and the waker), and what the
    /// current round declares.
    registered: Vec<(RawFd, bool)>,
    wanted: Vec<(RawFd, bool)>,
    fired: Vec<RawFd>,
    /// Declared descriptors epoll refuses (regular files, /dev/null): always ready, so
    /// while one is declared the space does not sleep.
    unpollable: Vec<RawFd>,
    events: Vec<EpollEvent>,
    /// Sleeps so far, and those a descriptor (not a deadline) ended.
    pub sleeps: u64,
}

const WAKER: u64 = u64::MAX;
const TIMER: u64 = u64::MAX - 1;

impl Readiness {
    pub fn new() -> std::io::Result<Readiness> {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        let waker = Arc::new(EventFd::new()?);
        ep.add(
            waker.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, WAKER),
        )?;
        ep.add(timer.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, TIMER))?;
        SPACES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&waker));
        Ok(Readiness {
            ep,
            timer,
            timer_at: None,
            waker,
            registered: Vec::new(),
            wanted: Vec::new(),
            fired: Vec::new(),
            unpollable: Vec::new(),
            events: vec![EpollEvent::empty(); 16],
            sleeps: 0,
        })
    }

    /// What wakes this space from another thread.
    pub fn waker(&self) -> Waker {
        Waker(self.waker.clone())
    }

    /// The descriptors that ended the last sleep.
    pub fn fired(&self) -> &[RawFd] {
        &self.fired
    }

    /// Start a round of arming: each source declares what it waits for into the [`Arm`].
    pub fn begin(&mut self) -> Arm<'_> {
        self.wanted.clear();
        Arm {
            fds: &mut self.wanted,
            fired: &self.fired,
            ready: false,
            poll: false,
            deadline: None,
        }
    }

    /// End a round of arming: whether to sleep, and until when at the latest.
    pub fn decide(arm: &Arm<'_>) -> (Decision, Option<Instant>) {
        if arm.ready || arm.poll {
            (Decision::Run, None)
        } else {
            (Decision::Sleep, arm.deadline)
        }
    }

    /// Sleep until a declared descriptor fires, the waker rings or `deadline` passes
    /// (`limit` bounds it: the space's own periodic work).
    pub fn sleep(&mut self, deadline: Option<Instant>, limit: Duration) -> std::io::Result<()> {
        self.sync()?;
        let now = Instant::now();
        let bound = now + limit;
        let at = deadline.map_or(bound, |d| d.min(bound));
        // Coarse bounds go into epoll's millisecond timeout; a finer deadline into the
        // timerfd (one settime when it changes).
        let left = at.saturating_duration_since(now);
        let fine = deadline.is_some_and(|d| d < bound) && left < Duration::from_millis(20);
        let timeout = if !self.unpollable.is_empty() {
            self.fired.clone_from(&self.unpollable);
            EpollTimeout::ZERO
        } else if fine {
            if self.timer_at != Some(at) {
                let ts = TimeSpec::from_duration(left.max(Duration::from_nanos(1)));
                self.timer
                    .set(Expiration::OneShot(ts), TimerSetTimeFlags::empty())?;
                self.timer_at = Some(at);
            }
            EpollTimeout::NONE
        } else {
            let ms = left.as_micros().div_ceil(1000).min(u16::MAX as u128) as u16;
            EpollTimeout::from(ms)
        };
        if self.unpollable.is_empty() {
            self.fired.clear();
        }
        self.sleeps += 1;
        let n = match self.ep.wait(&mut self.events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        for ev in &self.events[..n] {
            match ev.data() {
                WAKER => {}
                TIMER => {
                    // Read the expiry (non-blocking) so the level-triggered timer rests.
                    let _ = self.timer.wait();
                    self.timer_at = None;
                }
                fd => self.fired.push(fd as RawFd),
            }
        }
        Ok(())
    }

    /// Make the epoll set hold exactly what this round declared. Declarations rarely
    /// change (a source ends, a listener hands over to its connection): then the set is
    /// rebuilt from scratch, so a closed descriptor whose number came back is never taken
    /// for the old one.
    fn sync(&mut self) -> std::io::Result<()> {
        self.wanted.sort_unstable();
        self.wanted.dedup();
        if self.wanted == self.registered {
            return Ok(());
        }
        self.unpollable.clear();
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        ep.add(
            self.waker.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, WAKER),
        )?;
        ep.add(
            self.timer.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, TIMER),
        )?;
        for &(fd, edge) in &self.wanted {
            let flags = if edge {
                EpollFlags::EPOLLIN | EpollFlags::EPOLLET
            } else {
                EpollFlags::EPOLLIN
            };
            match sys::add_declared(&ep, fd, EpollEvent::new(flags, fd as u64)) {
                Ok(()) => {}
                // A regular file (or /dev/null) cannot be waited on: it is always ready,
                // and the source reads it without waiting.
                Err(nix::errno::Errno::EPERM) => self.unpollable.push(fd),
                Err(e) => return Err(e.into()),
            }
        }
        self.ep = ep;
        self.registered = self.wanted.clone();
        Ok(())
    }
}
