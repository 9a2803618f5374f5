package informers

import corev1 "k8s.io/api/core/v1"

// SlimPod is what the pod informer keeps of pod (its transform), for code that
// feeds a cache.Cache as the informers do, such as the differential test in
// test/oracle.
func SlimPod(pod *corev1.Pod) *corev1.Pod {
	out, _ := slimPod(pod.DeepCopy())
	return out.(*corev1.Pod)
}

// SlimNode is what the node informer keeps of n (its transform).
func SlimNode(n *corev1.Node) *corev1.Node {
	out, _ := slimNode(n.DeepCopy())
	return out.(*corev1.Node)
}
