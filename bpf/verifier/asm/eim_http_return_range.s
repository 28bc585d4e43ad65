# expect: reject return-value
# env: eim eim/http.yaml http_request observer
mov %r0, 7
exit
