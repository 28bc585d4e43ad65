# expect: reject read-only
# env: eim eim/http.yaml http_request responder
stw [%r1+0], 1
mov %r0, 1
exit
