# expect: reject eim-memory
# env: eim eim/http.yaml http_request observer
# map: big hash 8 1024 1024
mov %r0, 0
exit
