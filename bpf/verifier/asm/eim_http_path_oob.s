# expect: reject ctx-access
# env: eim eim/http.yaml http_request observer
ldxdw %r0, [%r1+2060]
mov %r0, 0
exit
