/* Fleet test extension, version 2: stamps 2 into the request (out = out * 10 + 2, so a
 * request that crossed a chain of hops carries one digit per hop), counts requests in
 * `hits`, returns 2. */
#include "stamp.h"

SEC("rdx/on_request")
int stamp_v2(struct ctx *c)
{
	count_request();
	c->out = c->out * 10 + 2;
	return 2;
}
