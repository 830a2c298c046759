#!/usr/bin/python3
"""Peers of the L4 namespace tests (run inside a namespace with `ip netns exec`).

usage: l4_peer.py serve IP TCP_PORT UDP_PORT ID   a backend: each TCP line is answered with
                                                   "ID\\n" ("ID IP:PORT\\n" for a line "who":
                                                   the peer's address as seen here), each UDP
                                                   datagram with "ID" (or "ID IP:PORT" for "who");
                                                   a line "big N": N bytes of "x" and a newline
       l4_peer.py session IP PORT                  one TCP connection kept open: for each line
                                                   "ask" on stdin, sends a line, prints the
                                                   answer; "quit" ends
       l4_peer.py udp IP PORT [TEXT]               one datagram (TEXT, default "hi"); prints
                                                   {"id", "from"} as JSON
"""
import json
import socket
import socketserver
import sys
import threading

cmd = sys.argv[1]
if cmd == "serve":
    ip, tcp_port, udp_port, ident = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

    class Lines(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                seen = ""
                if line.strip() == b"who":
                    seen = " %s:%d" % self.client_address
                elif line.startswith(b"big "):  # N bytes of "x" and a newline
                    self.wfile.write(b"x" * int(line.split()[1]) + b"\n")
                    self.wfile.flush()
                    continue
                self.wfile.write((ident + seen + "\n").encode())
                self.wfile.flush()

    class Datagrams(socketserver.BaseRequestHandler):
        def handle(self):
            data, sock = self.request
            seen = " %s:%d" % self.client_address if data.strip() == b"who" else ""
            sock.sendto((ident + seen).encode(), self.client_address)

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    tcp = socketserver.ThreadingTCPServer((ip, tcp_port), Lines)
    tcp.daemon_threads = True
    udp = socketserver.UDPServer((ip, udp_port), Datagrams)
    threading.Thread(target=udp.serve_forever, daemon=True).start()
    print("ready", flush=True)
    tcp.serve_forever()
elif cmd == "session":
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=5)
    f = s.makefile("rwb")
    print("connected", flush=True)
    for line in sys.stdin:
        if line.strip() != "ask":
            break
        f.write(b"hello\n")
        f.flush()
        print(f.readline().decode().strip(), flush=True)
    s.close()
elif cmd == "udp":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(sys.argv[4].encode() if len(sys.argv) > 4 else b"hi", (sys.argv[2], int(sys.argv[3])))
    data, addr = s.recvfrom(2048)
    print(json.dumps({"id": data.decode(), "from": [addr[0], addr[1]]}))
