# expect: reject eim-function
# env: eim eim/http.yaml http_request minimal
call 1002
mov %r0, 0
exit
