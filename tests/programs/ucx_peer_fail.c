/*
 * ucx_peer_fail: a client and a server (a forked child) over UCX's client-server API on
 * 127.0.0.1, on a port the kernel picks (the server listens on port 0, asks UCX which port it got
 * and passes it to the client through a pipe), both endpoints with peer error handling. The client sends one tagged message
 * of 64 bytes; the server receives it and ends at once without closing anything (as a crashed
 * rank does). The client then progresses until its endpoint error handler is called.
 * Prints "ucx_peer_fail handler <status>" (UCX's words) once the handler ran, then sends once more
 * on the failed endpoint and prints "ucx_peer_fail refused <status>" when UCX refuses that post
 * (an error status instead of a request), and exits 0; 1 after 20 s without the handler.
 * Nothing waits forever: the client exits 2 at once when the server ends before it listens (the
 * pipe reads end-of-file: the client holds no write end of it); the server ends when the client
 * does (parent-death signal) and after 20 s at most.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
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

static void fail(pid_t child, const char *what)
{
	fprintf(stderr, "ucx_peer_fail: %s\n", what);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	exit(2);
}

static void init(void)
{
	ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	if (ucp_init(&p, NULL, &ctx) != UCS_OK || ucp_worker_create(ctx, &wp, &worker) != UCS_OK)
		exit(2);
}

int main(void)
{
	int ready[2];
	unsigned short port = 0;
	char buf[64] = {0};
	pid_t parent = getpid();
	if (pipe(ready))
		return 2;
	pid_t child = fork();
	if (child < 0)
		return 2;
	if (child == 0) {
		/* Ends with the client, whatever happens to it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(3);
		close(ready[0]);
		init();
		struct sockaddr_in a = addr(0);
		ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
							  UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
					    .sockaddr = {.addr = (struct sockaddr *)&a, .addrlen = sizeof a},
					    .conn_handler = {.cb = on_conn}};
		ucp_listener_h l;
		if (ucp_listener_create(worker, &lp, &l) != UCS_OK)
			_exit(3);
		ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
		if (ucp_listener_query(l, &la) != UCS_OK || la.sockaddr.ss_family != AF_INET)
			_exit(3);
		port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
		if (write(ready[1], &port, sizeof port) != sizeof port)
			_exit(3);
		close(ready[1]);
		ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = on_recv};
		void *r = ucp_tag_recv_nbx(worker, buf, sizeof buf, 7, (ucp_tag_t)-1, &rp);
		if (UCS_PTR_IS_ERR(r))
			_exit(3);
		time_t until = time(NULL) + 20;
		while (!received && time(NULL) < until)
			ucp_worker_progress(worker);
		_exit(received ? 0 : 4); /* a crash: nothing closed */
	}
	/* The client holds no write end: the read ends (end of file) if the server dies first. */
	close(ready[1]);
	if (read(ready[0], &port, sizeof port) != sizeof port || port == 0)
		fail(child, "the server ended before it listened");
	close(ready[0]);
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
		fail(child, "ucp_ep_create failed");
	int sent = 0;
	ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				  .cb.send = on_send,
				  .user_data = &sent};
	void *r = ucp_tag_send_nbx(ep, buf, sizeof buf, 7, &sp);
	if (r == NULL)
		sent = 1;
	else if (UCS_PTR_IS_ERR(r))
		fail(child, "ucp_tag_send_nbx failed");
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
