/* The test node's volume helper (scripts/testenv-build.sh): the provisioner
 * of the node's StorageClass (rancher's local-path-provisioner) runs it in a
 * helper pod as its setupCommand and teardownCommand, with
 *
 *   -p PATH  the volume's directory (under the node's volume root)
 *   -s SIZE  the claim's size in bytes (local-path does not enforce it)
 *   -m MODE  Filesystem or Block
 *   -a ACTION  create or delete
 *
 * `create` makes PATH (and its parents) with mode 0777, so a pod of any UID
 * can write its workspace there, as the provisioner's stock `setup` script
 * does; `delete` removes PATH and everything under it, as `teardown` does,
 * without following a symbolic link out of it. Anything else is refused. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int make_dirs(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf || path[0] != '/') return -1;
  memcpy(buf, path, n + 1);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
      *p = c;
      if (c == '\0') break;
    }
  }
  /* mkdir's mode is cut by the umask: set it whole. */
  return chmod(path, 0777);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 || errno == ENOENT ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *path = NULL, *action = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-p") == 0) path = argv[i + 1];
    else if (strcmp(argv[i], "-a") == 0) action = argv[i + 1];
  }
  if (path == NULL || action == NULL || path[0] != '/' || strstr(path, "/..") != NULL) {
    fprintf(stderr, "volume-helper: usage: -p /ABSOLUTE/PATH -a create|delete [-s SIZE] [-m MODE]\n");
    return 2;
  }
  if (strcmp(action, "create") == 0) {
    if (make_dirs(path) != 0) {
      fprintf(stderr, "volume-helper: cannot create %s: %s\n", path, strerror(errno));
      return 1;
    }
    return 0;
  }
  if (strcmp(action, "delete") == 0) {
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
      fprintf(stderr, "volume-helper: cannot remove %s: %s\n", path, strerror(errno));
      return 1;
    }
    return 0;
  }
  fprintf(stderr, "volume-helper: unknown action %s (create or delete)\n", action);
  return 2;
}
