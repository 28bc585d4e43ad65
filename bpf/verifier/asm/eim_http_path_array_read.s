# expect: accept
# env: eim eim/http.yaml http_request observer
ldxb %r0, [%r1+200]
ldxdw %r2, [%r1+17]
and %r0, 1
exit
