# expect: reject eim-function
# env: eim eim/http.yaml http_request minimal
call 7
mov %r0, 0
exit
