# Shared by the proxy benchmarks (source it): a free loopback port, and the nginx configurations
# every comparison uses, so kvgate is always measured against the same reference proxy.
# CPU ticks (utime + stime) of every process whose command line matches $1, and of its children.
proc_ticks() {
  local t=0
  for p in $(pgrep -f "$1"); do for p in $p $(pgrep -P "$p"); do
    read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || echo "0 0")
    t=$((t + a + b))
  done; done
  echo $t
}
freeport() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# nginx_upstream_conf DIR PORT BODY: the upstream, one worker answering every request with BODY.
nginx_upstream_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<NGX
worker_processes 1; pid $1/nginx.pid; error_log $1/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  client_body_buffer_size 16k;
  server { listen 127.0.0.1:$2 backlog=4096;
    location / { default_type application/json; return 200 '$3'; } } }
NGX
}

# nginx_proxy_conf DIR PORT UPSTREAM_PORT [TOP]: nginx as a reverse proxy (one worker, proxy_pass
# to an upstream block with keepalive 256, HTTP/1.1, Connection ""); TOP is prepended (for
# example "master_process off;", so that strace or valgrind follows the worker itself).
nginx_proxy_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<NGX
${4:-}worker_processes 1; pid $1/nginx.pid; error_log $1/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  upstream up { server 127.0.0.1:$3; keepalive 256; keepalive_requests 10000000; }
  server { listen 127.0.0.1:$2 backlog=4096;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
}

# nginx_tls_relay_server PORT CERT KEY: a server block (for an http {} holding `upstream up`)
# relaying over TLS 1.2/1.3 as the streaming benchmarks compare it: no session cache, session
# tickets on (nginx's default, and what kvgate issues), proxy_buffering off (as for SSE).
nginx_tls_relay_server() {
  cat <<NGX
server { listen 127.0.0.1:$1 ssl backlog=4096;
    ssl_certificate $2; ssl_certificate_key $3; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; proxy_read_timeout 300s; } }
NGX
}

# kvgate_api OUT: waits (up to 5 s) for `kvgate serve`'s ready line in its stdout file OUT and
# prints the management API's base URL from it.
kvgate_api() {
  for _ in $(seq 1 50); do grep -q ready "$1" 2>/dev/null && break; sleep 0.1; done
  sed -E 's/.*"api":"([^"]+)".*/\1/' "$1"
}
