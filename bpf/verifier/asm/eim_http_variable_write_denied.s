# expect: reject eim-variable
# env: eim eim/http.yaml http_request observer
call 2001
stdw [%r0+0], 0
mov %r0, 0
exit
