// pss evaluates pod templates against a Pod Security Standards level with Kubernetes' own
// pod-security admission library (k8s.io/pod-security-admission), as the API server's
// PodSecurity admission does for a namespace labelled pod-security.kubernetes.io/enforce.
//
// Input: one JSON object per line on stdin, each a workload with a pod template
// (Deployment, StatefulSet, ...). Output: one JSON object per line,
// {"kind", "name", "allowed", "reasons", "details"}.
// Usage: pss [-level restricted] [-version latest|v1.NN]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

type workload struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Template corev1.PodTemplateSpec `json:"template"`
	} `json:"spec"`
}

type verdict struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	Allowed bool     `json:"allowed"`
	Reasons []string `json:"reasons"`
	Details []string `json:"details"`
}

func main() {
	level := flag.String("level", "restricted", "privileged, baseline or restricted")
	version := flag.String("version", "latest", "the policy version: latest or v1.NN")
	flag.Parse()
	lvl, err := api.ParseLevel(*level)
	if err != nil {
		fail(err)
	}
	ver, err := api.ParseVersion(*version)
	if err != nil {
		fail(err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var w workload
		if err := json.Unmarshal(in.Bytes(), &w); err != nil {
			fail(err)
		}
		template := w.Spec.Template
		result := policy.AggregateCheckResults(evaluator.EvaluatePod(
			api.LevelVersion{Level: lvl, Version: ver}, &template.ObjectMeta, &template.Spec))
		if err := out.Encode(verdict{w.Kind, w.Metadata.Name, result.Allowed,
			nonNil(result.ForbiddenReasons), nonNil(result.ForbiddenDetails)}); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pss:", err)
	os.Exit(2)
}
