# expect: accept
# env: eim eim/http.yaml http_request responder
stw [%r1+4], 404
mov %r0, 1
exit
