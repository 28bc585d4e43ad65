# expect: accept
# env: eim eim/http.yaml http_request observer
call 2001
ldxdw %r0, [%r0+0]
and %r0, 1
exit
