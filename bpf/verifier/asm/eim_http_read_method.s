# expect: accept
# env: eim eim/http.yaml http_request observer
ldxw %r0, [%r1+0]
and %r0, 1
exit
