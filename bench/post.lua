-- wrk script: a ~200-byte OpenAI-style JSON POST, as a chat client sends.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"bench-model","messages":[{"role":"system","content":"You are terse."},' ..
           '{"role":"user","content":"Name three prime numbers below twenty."}],' ..
           '"max_tokens":16,"temperature":0,"stream":false}'
