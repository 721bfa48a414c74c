/*
 * ucx_peer_fail PORT: a client and a server (a forked child) over UCX's client-server API on
 * 127.0.0.1:PORT, both endpoints with peer error handling. The client sends one tagged message
 * of 64 bytes; the server receives it and ends at once without closing anything (as a crashed
 * rank does). The client then progresses until its endpoint error handler is called.
 * Prints "ucx_peer_fail handler <status>" (UCX's words) once the handler ran, then sends once more
 * on the failed endpoint and prints "ucx_peer_fail refused <status>" when UCX refuses that post
 * (an error status instead of a request), and exits 0; 1 after 20 s without the handler.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h server_ep;
static volatile int failed, received;
static ucs_status_t failure;

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)arg, (void)ep;
	failure = status;
	failed = 1;
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
	(void)arg;
	ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
					   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
			     .conn_request = req,
			     .err_mode = UCP_ERR_HANDLING_MODE_PEER};
	if (ucp_ep_create(worker, &p, &server_ep) != UCS_OK)
		exit(3);
}

static void on_recv(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *ud)
{
	(void)req, (void)st, (void)info, (void)ud;
	received = 1;
}

static void on_send(void *req, ucs_status_t st, void *ud)
{
	(void)req, (void)st;
	*(int *)ud = 1;
}

static struct sockaddr_in addr(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	return a;
}

static void init(void)
{
	ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	if (ucp_init(&p, NULL, &ctx) != UCS_OK || ucp_worker_create(ctx, &wp, &worker) != UCS_OK)
		exit(2);
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 13377;
	int ready[2];
	char c = 0, buf[64] = {0};
	if (pipe(ready))
		return 2;
	pid_t child = fork();
	if (child == 0) {
		init();
		struct sockaddr_in a = addr(port);
		ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
							  UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
					    .sockaddr = {.addr = (struct sockaddr *)&a, .addrlen = sizeof a},
					    .conn_handler = {.cb = on_conn}};
		ucp_listener_h l;
		if (ucp_listener_create(worker, &lp, &l) != UCS_OK)
			_exit(3);
		if (write(ready[1], &c, 1) != 1)
			_exit(3);
		ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = on_recv};
		void *r = ucp_tag_recv_nbx(worker, buf, sizeof buf, 7, (ucp_tag_t)-1, &rp);
		if (UCS_PTR_IS_ERR(r))
			_exit(3);
		while (!received)
			ucp_worker_progress(worker);
		_exit(0); /* a crash: nothing closed */
	}
	if (read(ready[0], &c, 1) != 1)
		return 2;
	init();
	struct sockaddr_in a = addr(port);
	ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
					   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
					   UCP_EP_PARAM_FIELD_ERR_HANDLER,
			     .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
			     .sockaddr = {.addr = (struct sockaddr *)&a, .addrlen = sizeof a},
			     .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			     .err_handler = {.cb = on_error, .arg = NULL}};
	ucp_ep_h ep;
	if (ucp_ep_create(worker, &p, &ep) != UCS_OK)
		return 2;
	int sent = 0;
	ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				  .cb.send = on_send,
				  .user_data = &sent};
	void *r = ucp_tag_send_nbx(ep, buf, sizeof buf, 7, &sp);
	if (r == NULL)
		sent = 1;
	else if (UCS_PTR_IS_ERR(r))
		return 2;
	/* Progress while the server receives and ends, then until the handler runs. */
	int st, gone = 0;
	time_t until = time(NULL) + 20;
	while (!failed && time(NULL) < until) {
		ucp_worker_progress(worker);
		if (!gone && waitpid(child, &st, WNOHANG) == child)
			gone = 1;
	}
	if (!gone)
		kill(child, SIGKILL);
	if (!failed) {
		printf("ucx_peer_fail no handler call (sent %d)\n", sent);
		return 1;
	}
	printf("ucx_peer_fail handler %s\n", ucs_status_string(failure));
	/* One more send on the failed endpoint: UCX refuses it at once, with an error status. */
	void *again = ucp_tag_send_nbx(ep, buf, sizeof buf, 7, &sp);
	if (UCS_PTR_IS_ERR(again))
		printf("ucx_peer_fail refused %s\n", ucs_status_string(UCS_PTR_STATUS(again)));
	else
		printf("ucx_peer_fail not refused (%s)\n", again ? "a request" : "done at once");
	fflush(stdout);
	_exit(0); /* the endpoint is broken: leave as a program on this path would */
}
