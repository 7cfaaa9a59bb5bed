/*
 * lab-init: PID 1 of a lab node. Boots the node the way a SysV host does
 * (/etc/rc2.d/S* start, in order), reaps every orphan that lands on it, and on
 * SIGTERM stops services (/etc/rc0.d/K* stop), signals what is left and exits.
 * Built once with the lab's base image; C so an idle node costs ~1 MB, not a Python.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs "<dir>/<prefix>* <action>" in name order, each to completion. */
static void run_scripts(const char *dir, char prefix, const char *action) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512)
        if (e->d_name[0] == prefix)
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        pid_t pid = fork();
        if (pid == 0) {
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execl(path, path, action, (char *)NULL);
            _exit(127);
        }
        /* Reap everything until this script is done: orphans keep landing here. */
        for (;;) {
            pid_t got = waitpid(-1, NULL, 0);
            if (got == pid || (got < 0 && errno == ECHILD))
                break;
        }
        free(names[i]);
    }
}

static void reap(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

int main(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPWR);
    sigprocmask(SIG_BLOCK, &set, NULL);

    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    setenv("RUNLEVEL", "2", 1);
    run_scripts("/etc/rc2.d", 'S', "start");
    /* The lab waits for this file: boot scripts are done, sshd is listening. */
    FILE *f = fopen("/run/lab-booted", "w");
    if (f)
        fclose(f);

    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGCHLD) {
            reap();
            continue;
        }
        setenv("RUNLEVEL", "0", 1);
        run_scripts("/etc/rc0.d", 'K', "stop");
        kill(-1, SIGTERM);
        for (int i = 0; i < 20; i++) {
            reap();
            if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD)
                return 0;
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        kill(-1, SIGKILL);
        reap();
        return 0;
    }
}
