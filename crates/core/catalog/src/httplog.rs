//! The declaration of `filters::httplog`'s filter, `httplog` (its constructor is there).

use crate::{Access, FilterSpec, Kind, Param, Replication};

pub static HTTPLOG: FilterSpec = FilterSpec::new("httplog", Access::Inspection)
    .synopsis("httplog [format=clf|json] [flush=DURATION] [flows=N]")
    .description(
        "The weblog generator (thesis 7.3.2, httpwiki): one log line per HTTP/1.x request in the\n\
         TCP connections of a stream of frames, each line a block of its own. TCP is reassembled\n\
         (data overlapping earlier data with other bytes is ignored, counted) and requests are paired\n\
         with their responses in order, pipelined ones included; a request's line is written when its\n\
         response ends, or with - for status and size when its connection ends unanswered.\n\
         format=clf: Apache's Combined Log Format followed by the Host header and the microseconds\n\
         from request to the response's end (%D); format=json: an object with time, client,\n\
         client_port, server, server_port, method, host, uri, version, status, size, complete,\n\
         referer, user_agent, wait_us and duration_us (null for what was not seen). flush=10s holds\n\
         the lines and writes them together each time 10 s of capture time have passed (the\n\
         thesis' throttle), and at the end. What is not HTTP is counted in the summary.",
    )
    .params(&[
        Param::new("format", "clf (Combined Log Format, default) or json (also positional)")
            .at(0)
            .kind(Kind::Choice(&["clf", "json"]))
            .default("clf"),
        Param::new("flush", "hold lines and write them together every DURATION of capture time (10s, 500ms, 1m; 0: as they finish)")
            .default("0"),
        Param::new("flows", "connections followed at once (the least recently active go first, their requests written)")
            .kind(Kind::Size)
            .default("64K"),
    ])
    .classes("1 for a line whose response was seen, 2 for a request never answered")
    .class_names(&[("answered", 1), ("unanswered", 2)])
    .example("streamline run 'pcapin file=examples/sample.pcap | httplog | outfile file=access.log'")
    .replication(Replication::Never(
        "a connection's requests and responses must meet in one copy, and the log keeps their order",
    ));
