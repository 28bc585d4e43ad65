# expect: reject too-complex
# env: eim eim/packet.yaml packet_in strict
call 7
mov %r1, %r0
mov %r0, 0
loop:
add %r0, 1
jne %r0, %r1, loop
mov %r0, 0
exit
