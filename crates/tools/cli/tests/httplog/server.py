"""The web server of tests/httplog.rs: Python's http.server, HTTP/1.1 with keep-alive,
answering every method. The path says what to answer:

  /len/N        N bytes with Content-Length
  /chunked/N    N bytes in chunks of up to 1000 (Transfer-Encoding: chunked)
  /status/NNN   that status (no body for 204 and 304), a short body otherwise
  /close/N      N bytes with neither length nor chunking, then the connection closes
  /drop         no answer: the connection closes
  anything else 200 with a short body

A request body (Content-Length) is read and thrown away. Usage: server.py ADDR PORT
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        parts = self.path.split("?")[0].strip("/").split("/")
        kind, arg = parts[0], (parts[1] if len(parts) > 1 else "")
        if kind == "drop":
            self.close_connection = True
            return
        if kind == "len":
            self.reply(200, b"x" * int(arg))
        elif kind == "chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            left = int(arg)
            while left > 0:
                k = min(left, 1000)
                self.wfile.write(b"%x\r\n" % k + b"y" * k + b"\r\n")
                left -= k
            self.wfile.write(b"0\r\n\r\n")
        elif kind == "status":
            code = int(arg)
            if code in (204, 304):
                self.send_response(code)
                self.end_headers()
            else:
                self.reply(code, b"status %d\n" % code)
        elif kind == "close":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"z" * int(arg))
            self.close_connection = True
        else:
            self.reply(200, b"hello\n")

    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = answer


ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
