"""One and two Nadam steps by hand vs the ported lib.NadamOptimizer (TF 1.11 contrib NadamOptimizer semantics:
AdamOptimizer + ApplyAdam(use_nesterov=True)). Also shows the beta-power accumulators' initial values when
beta1/beta2 are variables created as the authors do (tf.get_variable without initializer, then assigned)."""
import sys
sys.path.insert(0, "/work/authors/TPR-RNN")
import numpy as np
from lib import tf, NadamOptimizer

tf.set_random_seed(0)
lr, b1, b2, eps = 0.008, 0.6, 0.4, 1e-8

def build(hyper_as_variables):
    g = tf.Graph()
    with g.as_default():
        x = tf.get_variable("x", initializer=tf.constant([0.5, -1.0, 2.0]))
        grad = tf.placeholder(tf.float32, [3])
        if hyper_as_variables:  # as tpr_rnn_graph.py
            with tf.variable_scope("hyper_params"):
                _lr = tf.get_variable("learning_rate", shape=[], trainable=False)
                _b1 = tf.get_variable("beta1", shape=[], trainable=False)
                _b2 = tf.get_variable("beta2", shape=[], trainable=False)
            init_h = [_lr.assign(lr), _b1.assign(b1), _b2.assign(b2)]
            opt = NadamOptimizer(_lr, beta1=_b1, beta2=_b2)
        else:
            init_h = []
            opt = NadamOptimizer(lr, beta1=b1, beta2=b2)
        step = opt.apply_gradients([(grad, x)])
        b1p, b2p = opt._get_beta_accumulators()
        sess = tf.Session(graph=g)
        sess.run(tf.global_variables_initializer())
        sess.run(init_h)
    return sess, x, grad, step, b1p, b2p

def by_hand(x, m, v, g, b1pow, b2pow):
    lr_t = lr * np.sqrt(1 - b2pow) / (1 - b1pow)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    x = x - lr_t * ((1 - b1) * g + b1 * m) / (np.sqrt(v) + eps)
    return x, m, v

grads = [np.array([0.3, -0.2, 1.5], np.float32), np.array([-0.1, 0.4, 0.2], np.float32)]
for hv in (False, True):
    sess, x, grad, step, b1p, b2p = build(hv)
    xv, m, v = sess.run(x).astype(np.float64), np.zeros(3), np.zeros(3)
    print(f"hyper-parameters as {'variables (the authors)' if hv else 'python floats'}: beta1_power, beta2_power at start =", sess.run([b1p, b2p]))
    for t, g in enumerate(grads, 1):
        p1, p2 = sess.run([b1p, b2p])
        xv, m, v = by_hand(xv, m, v, g.astype(np.float64), p1, p2)
        sess.run(step, {grad: g})
        got = sess.run(x)
        print(f"  step {t}: TF {got}  by hand {xv}  max|diff| {np.max(np.abs(got - xv)):.2e}")
    print("  beta powers after 2 steps:", sess.run([b1p, b2p]))
