# expect: accept
# env: eim eim/http.yaml http_request observer
# map: times array 4 8 8
call 1001
jsgt %r0, 0, pos
ldxdw %r0, [%r10-8]
pos:
mov %r0, 0
exit
