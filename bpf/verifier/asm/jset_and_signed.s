# expect: accept
# env: socket_filter
ldxw %r2, [%r1+0]
jset %r2, 1, odd
jsgt %r2, 100, big
mov %r0, 0
exit
odd:
mov %r0, 1
exit
big:
mov %r0, 2
exit
