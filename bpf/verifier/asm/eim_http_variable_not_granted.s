# expect: reject eim-variable
# env: eim eim/http.yaml http_request minimal
call 2001
mov %r0, 0
exit
