/* The pod sandbox's process for the test node (scripts/testenv-build.sh):
 * it holds the pod's namespaces and does nothing else. It sleeps in pause()
 * until SIGTERM or SIGINT, which end it with status 0, and reaps any child
 * re-parented to it (it is PID 1 of the pod's PID namespace when shared). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  sigemptyset(&stop.sa_mask);
  sigemptyset(&child.sa_mask);
  if (sigaction(SIGTERM, &stop, NULL) || sigaction(SIGINT, &stop, NULL) ||
      sigaction(SIGCHLD, &child, NULL))
    return 1;
  for (;;) pause();
}
