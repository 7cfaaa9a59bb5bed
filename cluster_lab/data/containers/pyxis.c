/*
 * pyxis, simulated by the cluster-tool lab: a Slurm SPANK plugin that runs a job step's tasks
 * in a container enroot makes from `--container-image`.
 *
 * As NVIDIA's pyxis (its README): the plugin must be in plugstack.conf wherever srun runs (on a
 * login node srun refuses an option no plugin registered) and where slurmd runs; in the step,
 * user_init imports the image (enroot import docker://IMAGE) and creates the container (enroot
 * create), each task enters it before its command is resolved and exec'd (task_init), the
 * image's environment is added to the task's, and the container is removed when the step ends.
 *
 * What it simplifies: the real pyxis joins the namespaces of a container process `enroot start`
 * made; this one gives each task a mount namespace of its own, has enroot mount the container's
 * mounts.d and run its hooks there (`enroot mount`, a lab-only command), and chroots (the lab
 * runs jobs as root).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(pyxis, 1)

static char *image;
static char name[64];
static char tmpdir[64];
static char sqsh[128];
static char rootfs[4096];
static int created;

static int set_image(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	if (optarg == NULL || optarg[0] == '\0' || strlen(optarg) > 1024)
		return -1;
	free(image);
	image = strdup(optarg);
	return image == NULL ? -1 : 0;
}

struct spank_option spank_options[] = {
	{ "container-image", "[USER@][REGISTRY#]IMAGE[:TAG]",
	  "[pyxis] the container image to run the job step's tasks in", 1, 0, set_image },
	SPANK_OPTIONS_TABLE_END
};

/* Runs argv (no shell) in the environment envp (NULL: this process's); its stdout into out
 * (NUL-terminated, newline stripped) when out is not NULL. Returns the exit status, or -1. */
static int run_in(char *const argv[], char *const envp[], char *out, size_t outlen)
{
	int pipefd[2] = { -1, -1 };
	if (out != NULL && pipe(pipefd) != 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (out != NULL) {
			dup2(pipefd[1], STDOUT_FILENO);
			close(pipefd[0]);
			close(pipefd[1]);
		}
		if (envp != NULL)
			execvpe(argv[0], argv, envp);
		else
			execvp(argv[0], argv);
		_exit(127);
	}
	if (out != NULL) {
		size_t used = 0;
		ssize_t got;
		close(pipefd[1]);
		while (used + 1 < outlen &&
		       (got = read(pipefd[0], out + used, outlen - 1 - used)) != 0) {
			if (got < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			used += (size_t)got;
		}
		out[used] = '\0';
		while (used > 0 && out[used - 1] == '\n')
			out[--used] = '\0';
		close(pipefd[0]);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run(char *const argv[], char *out, size_t outlen)
{
	return run_in(argv, NULL, out, outlen);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	uint32_t job = 0, step = 0;
	char uri[1100];
	(void)ac;
	(void)av;
	if (image == NULL || !spank_remote(sp))
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		return -1;
	snprintf(name, sizeof(name), "pyxis_%u.%u", job, step);
	/* The image file in a folder of the step's own: no name in /tmp another user could plant. */
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/pyxis.XXXXXX");
	if (mkdtemp(tmpdir) == NULL) {
		slurm_error("pyxis: no temporary folder: %m");
		tmpdir[0] = '\0';
		return -1;
	}
	snprintf(sqsh, sizeof(sqsh), "%s/image.sqsh", tmpdir);
	if (strncmp(image, "docker://", 9) == 0)
		snprintf(uri, sizeof(uri), "%s", image);
	else
		snprintf(uri, sizeof(uri), "docker://%s", image);
	char *import[] = { "enroot", "import", "--output", sqsh, uri, NULL };
	int rc = run(import, NULL, 0);
	if (rc != 0) {
		slurm_error("pyxis: failed to import docker image %s (enroot exited %d)", image, rc);
		return -1;
	}
	char *create[] = { "enroot", "create", "--name", name, sqsh, NULL };
	rc = run(create, NULL, 0);
	unlink(sqsh);
	rmdir(tmpdir);
	tmpdir[0] = '\0';
	if (rc != 0) {
		slurm_error("pyxis: failed to create container filesystem (enroot exited %d)", rc);
		return -1;
	}
	created = 1;
	char *where[] = { "enroot", "rootfs", name, NULL };
	if (run(where, rootfs, sizeof(rootfs)) != 0 || rootfs[0] != '/') {
		slurm_error("pyxis: no root for container %s", name);
		return -1;
	}
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!created || !spank_remote(sp))
		return 0;
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		slurm_error("pyxis: could not make a mount namespace: %m");
		return -1;
	}
	/* As the real pyxis starts enroot, in the job step's environment: its hooks read the step's
	 * SLURM_* and PMIX_* settings from there (enroot's 50-slurm-pmi.sh). */
	char **job_env = NULL;
	if (spank_get_item(sp, S_JOB_ENV, &job_env) != ESPANK_SUCCESS)
		job_env = NULL;
	char *start[] = { "enroot", "mount", rootfs, NULL };
	int rc = run_in(start, job_env, NULL, 0);
	if (rc != 0) {
		slurm_error("pyxis: container start failed with error code: %d", rc);
		return -1;
	}
	return 0;
}

/* The image's environment (its /etc/environment), under what the job set. */
static void add_environment(spank_t sp)
{
	char path[4200], line[4096];
	snprintf(path, sizeof(path), "%s/etc/environment", rootfs);
	FILE *env = fopen(path, "re");
	if (env == NULL)
		return;
	while (fgets(line, sizeof(line), env) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		char *eq = strchr(line, '=');
		if (eq == NULL || eq == line)
			continue;
		*eq = '\0';
		spank_setenv(sp, line, eq + 1, 0);
	}
	fclose(env);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!created || !spank_remote(sp))
		return 0;
	add_environment(sp);
	if (chroot(rootfs) != 0 || chdir("/") != 0) {
		slurm_error("pyxis: could not enter container %s: %m", name);
		return -1;
	}
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (created && spank_remote(sp)) {
		char *remove[] = { "enroot", "remove", "--force", name, NULL };
		run(remove, NULL, 0);
		created = 0;
	}
	if (tmpdir[0] != '\0') {
		unlink(sqsh);
		rmdir(tmpdir);
	}
	return 0;
}
