# expect: reject read-only
# env: socket_filter
stw [%r1+0], 1
mov %r0, 0
exit
