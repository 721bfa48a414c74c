/* Posts N tagged receives of 4096 bytes for tags nobody sends, cancels each
 * (ucp_request_cancel) and waits for its callback: no message arrives, nothing fails.
 * Prints "ucx_cancel N cancelled" when every callback said UCS_ERR_CANCELED. */
#include <stdio.h>
#include <stdlib.h>
#include <ucp/api/ucp.h>

static int done, cancelled;

static void on_recv(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *ud)
{
	(void)req, (void)info, (void)ud;
	done++;
	cancelled += st == UCS_ERR_CANCELED;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
	ucp_context_h ctx;
	ucp_worker_h w;
	if (ucp_init(&p, NULL, &ctx) != UCS_OK)
		return 1;
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	if (ucp_worker_create(ctx, &wp, &w) != UCS_OK)
		return 1;
	static char buf[4096];
	for (int i = 0; i < n; i++) {
		ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = on_recv};
		void *r = ucp_tag_recv_nbx(w, buf, sizeof buf, 1000 + i, (ucp_tag_t)-1, &rp);
		if (UCS_PTR_IS_ERR(r) || r == NULL)
			return 2;
		ucp_request_cancel(w, r);
		while (done <= i)
			ucp_worker_progress(w);
		ucp_request_free(r);
	}
	ucp_worker_destroy(w);
	ucp_cleanup(ctx);
	printf("ucx_cancel %d cancelled\n", cancelled);
	return cancelled == n ? 0 : 3;
}
