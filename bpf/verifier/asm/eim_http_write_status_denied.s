# expect: reject eim-context
# env: eim eim/http.yaml http_request observer
stw [%r1+4], 404
mov %r0, 0
exit
