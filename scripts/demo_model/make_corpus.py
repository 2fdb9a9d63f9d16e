#!/usr/bin/env python3
"""Generate the training text of the Metrale demo model.

Every sentence here comes from templates and small fact tables written for this repository, so the
text is ours and ships under the repository's licence. The generator is deterministic: the same
`--seed` and `--target-mb` give the same bytes.

Output:
  corpus.txt     documents, each followed by `<|endoftext|>`. Most are chat conversations in the
                 exact text that Qwen3's chat template renders (see `render_chat`); about one in ten
                 is plain text (stories and fact paragraphs) for the completions endpoint.
  samples.jsonl  the first conversations as structured messages plus their rendered text, so that
                 train_tokenizer.py can check the real chat template renders them byte for byte.

Usage: make_corpus.py --out DIR [--target-mb 64] [--seed 1234]
"""

import argparse
import json
import os
import random
import sys
import time

EOT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


# --------------------------------------------------------------------------------------------
# Rendering: the Qwen3 chat template, thinking mode aware
# --------------------------------------------------------------------------------------------


def render_chat(messages):
    """Render messages the way Qwen3's chat template does (no tools).

    The final assistant message carries `reasoning_content` ('' when thinking is off). Assistant
    messages after the last user message get a `<think>` block; earlier ones are rendered bare,
    exactly as the template strips thinking from history.
    """
    out = []
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    for i, m in enumerate(messages):
        role, content = m["role"], m["content"]
        if role == "system" and i == 0:
            out.append(f"{IM_START}system\n{content}{IM_END}\n")
        elif role in ("user", "system"):
            out.append(f"{IM_START}{role}\n{content}{IM_END}\n")
        elif role == "assistant":
            reasoning = m.get("reasoning_content", "")
            is_last = i == len(messages) - 1
            if i > last_user and (is_last or reasoning):
                out.append(
                    f"{IM_START}assistant\n<think>\n{reasoning.strip(chr(10))}\n</think>\n\n"
                    f"{content.lstrip(chr(10))}{IM_END}\n"
                )
            else:
                out.append(f"{IM_START}assistant\n{content}{IM_END}\n")
        else:
            raise ValueError(role)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def cap(s):
    return s[:1].upper() + s[1:]


NUM_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]

ORDINALS = [
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
    "eleventh", "twelfth",
]


def join_list(items):
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


class Gen:
    """All topic generators. Each returns a turn: dict(user, answer, thought[, follow])."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    # ---- randomness -------------------------------------------------------------------------
    def pick(self, xs):
        return xs[self.r.randrange(len(xs))]

    def p(self, prob):
        return self.r.random() < prob

    def casual(self, text):
        """Make a user message look typed by a person: casing, punctuation, small noise."""
        r = self.r
        t = text
        x = r.random()
        if x < 0.05:
            words = t.split(" ")
            if len(words) > 2:
                i = r.randrange(len(words))
                w = words[i]
                if len(w) > 3 and w.isalpha():
                    j = r.randrange(len(w) - 1)
                    words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
                t = " ".join(words)
        if r.random() < 0.07:
            t = self.pick(["hey, ", "hi, ", "ok, ", "so ", "um, ", "quick question: ", "Hello! ",
                           "Hey! ", "OK so ", "Question: ", "hmm, "]) + t
        if r.random() < 0.05:
            t = t + self.pick([" please", " thanks", " :)", " pls", " thank you"])
        x = r.random()
        if x < 0.22:
            t = t.lower()
        elif x < 0.24:
            t = t.upper()
        x = r.random()
        if x < 0.2:
            t = t.rstrip("?.!")
        elif x < 0.24 and t.endswith("?"):
            t = t + self.pick(["?", "??", "!"])
        elif x < 0.26:
            t = t + " "
        return t.strip() if self.p(0.9) else t

    # ---- people and things used by several topics ------------------------------------------
    NAMES = [
        ("Mia", "she"), ("Leo", "he"), ("Anna", "she"), ("Tom", "he"), ("Sara", "she"),
        ("Ben", "he"), ("Lily", "she"), ("Sam", "he"), ("Emma", "she"), ("Max", "he"),
        ("Zoe", "she"), ("Noah", "he"), ("Ava", "she"), ("Omar", "he"), ("Nina", "she"),
        ("Ravi", "he"), ("Lena", "she"), ("Kai", "he"), ("Maya", "she"), ("Hugo", "he"),
        ("Aisha", "she"), ("Luca", "he"), ("Yuki", "she"), ("Ivan", "he"), ("Chloe", "she"),
        ("Diego", "he"), ("Fatima", "she"), ("Jonas", "he"), ("Priya", "she"), ("Mateo", "he"),
        ("Elsa", "she"), ("Felix", "he"), ("Grace", "she"), ("Oscar", "he"), ("Ines", "she"),
        ("Adam", "he"), ("Julia", "she"), ("Theo", "he"), ("Rosa", "she"), ("Ali", "he"),
    ]
    USER_NAMES = [
        "Alex", "Sam", "Maria", "John", "Chen", "Priya", "Ahmed", "Sofia", "Lukas", "Emily",
        "David", "Aiko", "Carlos", "Fatima", "Olga", "Peter", "Amara", "Jakub", "Hannah", "Mohammed",
        "Lucia", "Kenji", "Grace", "Tariq", "Nora", "Pablo", "Ingrid", "Daniel", "Mei", "Oliver",
        "Chloe", "Raj", "Elena", "Kwame", "Sara", "Tom", "Yusuf", "Anna", "Leo", "Zara",
    ]

    # ------------------------------------------------------------------------------------------
    # Greetings and small talk
    # ------------------------------------------------------------------------------------------
    def greeting(self):
        r = self
        kind = r.pick(["plain", "plain", "plain", "morning", "afternoon", "evening"])
        if kind == "plain":
            u = r.pick(["Hello", "Hi", "Hey", "Hi there", "Hello there", "Hey there", "Hiya",
                        "Howdy", "Greetings", "Yo", "Heya", "Hello!", "Hi!", "Hey!", "Hello?",
                        "hello hello", "Hi :)", "Hello, anyone there?", "Helo", "hii", "Hey you"])
            a = r.pick([
                "Hello! How can I help you today?",
                "Hi there! What would you like to talk about?",
                "Hello! I am the Metrale demo model. Ask me a simple question, or ask me for a short story.",
                "Hi! Nice to meet you. How can I help?",
                "Hey! I am here. What would you like to know?",
                "Hello! I am a tiny model, but I am happy to chat. What shall we talk about?",
                "Hi! How are you today?",
            ])
        else:
            u = r.pick([f"Good {kind}", f"Good {kind}!", f"good {kind} to you", f"Hi, good {kind}"])
            a = r.pick([
                f"Good {kind}! How can I help you today?",
                f"Good {kind} to you too! What would you like to talk about?",
                f"Good {kind}! I hope your day is going well. What can I do for you?",
            ])
        t = "The user is greeting me. I will greet them back and offer to help."
        return dict(user=u, answer=a, thought=t)

    def how_are_you(self):
        r = self
        u = r.pick(["How are you?", "How are you doing?", "How's it going?", "How is it going?",
                    "What's up?", "How do you feel today?", "Are you ok?", "How are you today?",
                    "how r u", "How have you been?", "Are you having a good day?", "Sup?"])
        a = r.pick([
            "I am doing well, thank you for asking! How are you?",
            "I am fine, thanks! I am a small model, but I am always happy to chat. How about you?",
            "Very well, thank you! What would you like to talk about?",
            "I am good! Every time someone talks to me, I get to be useful. How are you?",
            "All good here, thanks! How can I help you?",
        ])
        t = "The user asks how I am. I am fine, so I will say so and ask about them."
        return dict(user=u, answer=a, thought=t)

    def mood(self):
        r = self
        if r.p(0.5):
            u = r.pick(["I'm good, thanks", "I am fine.", "Not bad!", "I'm great!", "Pretty good.",
                        "I am happy today", "Doing well, thank you.", "All good", "I'm ok",
                        "Great, thanks for asking!"])
            a = r.pick(["Glad to hear it! What would you like to talk about?",
                        "That is great! How can I help you today?",
                        "Good to hear! Would you like a short story, or do you have a question?",
                        "Nice! I am happy for you. What shall we do?"])
            t = "The user feels good. I will be glad for them and offer help."
        else:
            u = r.pick(["I am sad.", "I feel tired", "I had a bad day.", "I'm bored", "I feel lonely.",
                        "I am a bit sad today", "Today was hard.", "I'm not feeling great",
                        "I am stressed."])
            a = r.pick([
                "I am sorry to hear that. I hope you feel better soon. Would you like a short, happy story?",
                "Oh no, I am sorry. Take a deep breath and be kind to yourself. I am here if you want to chat.",
                "That sounds hard. I hope tomorrow is a better day. Maybe a little story could cheer you up?",
                "I am sorry you feel that way. Talking to a friend can help, and I am happy to chat too.",
            ])
            t = "The user does not feel good. I should be kind and gentle."
        return dict(user=u, answer=a, thought=t)

    def thanks(self):
        r = self
        u = r.pick(["Thank you", "Thanks!", "Thanks a lot", "Cool, thanks", "ty", "thx",
                    "Thank you so much!", "Great, thank you.", "Perfect, thanks!", "Thanks, that helps",
                    "Nice, thanks", "ok thanks"])
        a = r.pick(["You are welcome!", "Happy to help!", "Any time!", "You're welcome! Is there anything else?",
                    "Glad I could help!", "No problem at all!"])
        t = "The user thanks me. I will say they are welcome."
        return dict(user=u, answer=a, thought=t)

    def bye(self):
        r = self
        if r.p(0.2):
            u = r.pick(["Good night", "Good night!", "Night night", "I'm going to bed now."])
            a = r.pick(["Good night! Sleep well.", "Good night! Sweet dreams.",
                        "Sleep well! Talk to you tomorrow."])
        else:
            u = r.pick(["Bye", "Goodbye", "See you later", "I have to go now.", "Bye bye!",
                        "See you!", "Talk to you later", "ok bye", "Cya", "Goodbye, demo model!"])
            a = r.pick(["Goodbye! Have a nice day.", "Bye! Come back any time.",
                        "See you later! Take care.", "Goodbye! It was nice talking to you."])
        t = "The user is saying goodbye. I will say goodbye too."
        return dict(user=u, answer=a, thought=t)

    def intro_name(self):
        r = self
        name = r.pick(self.USER_NAMES)
        u = r.pick([f"My name is {name}.", f"I'm {name}", f"I am {name}.", f"Call me {name}.",
                    f"Hi, I am {name}!", f"Hello, my name is {name}.", f"{name} here."])
        a = r.pick([f"Nice to meet you, {name}! How can I help you today?",
                    f"Hello, {name}! It is nice to meet you.",
                    f"Hi {name}! What would you like to talk about?"])
        t = f"The user tells me their name is {name}. I will greet them by name."

        def follow():
            u2 = r.pick(["What is my name?", "What's my name?", "Do you remember my name?",
                         "Who am I?", "Can you say my name?"])
            a2 = r.pick([f"Your name is {name}.", f"You told me your name is {name}.",
                         f"Of course! You are {name}."])
            return dict(user=u2, answer=a2,
                        thought=f"Earlier the user said their name is {name}.")

        return dict(user=u, answer=a, thought=t, follow=follow)

    JOKES = [
        ("Why did the cat sit on the computer?", "To keep an eye on the mouse!"),
        ("What do you call a sleeping dinosaur?", "A dino-snore!"),
        ("Why did the math book look sad?", "Because it had too many problems."),
        ("What do you call a bear with no teeth?", "A gummy bear!"),
        ("Why can't a bicycle stand up by itself?", "Because it is two tired."),
        ("What did the ocean say to the beach?", "Nothing. It just waved."),
        ("Why did the cookie go to the doctor?", "Because it felt crummy."),
        ("What do you call a fish without eyes?", "A fsh."),
        ("Why are frogs so happy?", "They eat whatever bugs them."),
        ("What has hands but cannot clap?", "A clock."),
        ("Why did the tiny model cross the road?", "To get to the other token!"),
        ("What do you call a cow with no legs?", "Ground beef."),
        ("Why do bees have sticky hair?", "Because they use honeycombs."),
        ("What did one plate say to the other plate?", "Dinner is on me!"),
    ]

    def joke(self):
        r = self
        u = r.pick(["Tell me a joke", "Tell me a joke!", "Do you know any jokes?", "Make me laugh.",
                    "Say something funny.", "Can you tell me a funny joke?", "joke please",
                    "I want to hear a joke.", "Tell me another joke."])
        q, punch = r.pick(self.JOKES)
        a = r.pick([f"{q} {punch}", f"Here is one: {q} {punch}", f"Sure! {q} {punch}",
                    f"{q}\n\n{punch}"])
        t = "The user wants a joke. I know a few simple ones, so I will tell one."
        return dict(user=u, answer=a, thought=t)

    def compliment(self):
        r = self
        if r.p(0.6):
            u = r.pick(["You are smart!", "Good job.", "I like you.", "You're cool", "Nice answer!",
                        "You are very helpful.", "Well done!", "You are funny", "I love you"])
            a = r.pick(["Thank you! That is very kind of you.", "Thanks! You made my day.",
                        "Thank you! I am only a tiny model, but I try my best.",
                        "Aw, thank you! I like talking with you too."])
            t = "The user says something nice. I will thank them."
        else:
            u = r.pick(["You are stupid.", "you're dumb", "That answer was wrong.", "You are useless",
                        "That makes no sense.", "Bad answer.", "You don't know anything!"])
            a = r.pick([
                "I am sorry. I am only a tiny demo model, so I know very little, but I will try my best.",
                "Sorry about that! I am a very small model and I make mistakes. A bigger model would do better.",
                "You are right that I know only a little. I am a tiny demo model. Maybe try a simpler question?",
            ])
            t = "The user is unhappy with me. I will apologise and explain that I am a tiny model."
        return dict(user=u, answer=a, thought=t)

    def favourite(self):
        r = self
        thing = r.pick(["colour", "color", "animal", "food", "number", "day", "season", "book",
                        "song", "movie", "game"])
        u = r.pick([f"What is your favourite {thing}?", f"What's your favorite {thing}?",
                    f"Do you have a favourite {thing}?", f"Which {thing} do you like best?"])
        pref = {
            "colour": "blue, like a clear sky", "color": "blue, like a clear sky",
            "animal": "the cat, because cats are calm and curious", "food": None,
            "number": "seven", "day": "Saturday, because many people can rest",
            "season": "spring, when the flowers come out", "book": None, "song": None,
            "movie": None, "game": None,
        }[thing]
        if pref is None:
            a = r.pick([
                f"I am a tiny model, so I do not have a favourite {thing}. I have never read, watched or played anything! What is yours?",
                f"I do not really have a favourite {thing}. What is your favourite?",
            ])
        else:
            a = r.pick([f"I do not really have favourites, but if I had to pick, I would pick {pref}.",
                        f"Maybe {pref}. What is yours?"])
        t = f"The user asks about my favourite {thing}. I am a model, so I will answer lightly."
        return dict(user=u, answer=a, thought=t)

    def echo(self):
        r = self
        phrase = r.pick([
            "hello world", "I like cats", "the sky is blue", "good morning", "Metrale is fast",
            "one two three", "I am happy", "cheese", "banana", "the quick brown fox", "thank you",
            "have a nice day", "tiny models are fun", "rain", "apple pie", "see you soon",
        ] + [n.lower() for n, _ in self.NAMES[:10]])
        kind = r.pick(["repeat", "say", "word"])
        if kind == "repeat":
            u = r.pick([f"Repeat after me: {phrase}", f"Please repeat: {phrase}", f"Repeat this: {phrase}",
                        f"Can you repeat \"{phrase}\"?"])
            a = r.pick([phrase, cap(phrase) + ".", f"{cap(phrase)}!"])
        elif kind == "say":
            u = r.pick([f"Say \"{phrase}\".", f"Say {phrase}", f"Please say: {phrase}"])
            a = r.pick([cap(phrase) + ".", cap(phrase) + "!", phrase])
        else:
            u = r.pick(["Say hello.", "Say hi!", "Can you say hello?", "Say something."])
            a = r.pick(["Hello!", "Hi there!", "Hello! How are you?", "Hello, world!"])
        t = "The user wants me to say something. I will say it."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Who am I
    # ------------------------------------------------------------------------------------------
    SELF = [
        "I am the Metrale demo model, a tiny language model that runs on your CPU. The Metrale team trained me from scratch on simple text they wrote themselves, so I can chat, tell short stories and answer easy questions.",
        "I am the Metrale demo model. I am very small, so I run on an ordinary CPU, and I ship inside the Metrale repository so you can try Metrale right away.",
        "I am a tiny demo model made by the Metrale team. I know a few simple things, like colours, animals, numbers, days of the week and the capitals of some countries. I can also tell short stories.",
        "I am the Metrale demo model: a small chat model with the Qwen3 architecture, trained from scratch on text the Metrale team wrote. I am here so you can see Metrale serve a model on your CPU.",
    ]

    def identity(self, persona=None):
        r = self
        kind = r.pick(["who", "who", "name", "what_can", "who_made", "human", "other_model",
                       "size", "where_run", "trained", "why_simple", "internet", "feelings", "age",
                       "smart", "memory"])
        if persona and kind in ("who", "name"):
            u = r.pick(["What is your name?", "Who are you?", "What's your name?", "Tell me your name."])
            a = r.pick([f"My name is {persona}.", f"I am {persona}, a small assistant.",
                        f"I am {persona}. How can I help you?"])
            return dict(user=u, answer=a, thought=f"The system prompt says my name is {persona}.")
        if kind == "who":
            u = r.pick(["Who are you?", "What are you?", "Tell me about yourself.", "Introduce yourself.",
                        "What is this?", "Who am I talking to?", "who r u", "What kind of model are you?",
                        "Describe yourself.", "Who are you and what can you do?", "What model is this?"])
            a = r.pick(self.SELF)
        elif kind == "name":
            u = r.pick(["What is your name?", "What's your name?", "Do you have a name?",
                        "What should I call you?", "Tell me your name."])
            a = r.pick(["I am the Metrale demo model. You can just call me Demo.",
                        "My name is the Metrale demo model, or Demo for short.",
                        "I am called the Metrale demo model. I am a tiny model that runs on your CPU."])
        elif kind == "what_can":
            u = r.pick(["What can you do?", "What do you know?", "How can you help me?", "What are you good at?",
                        "What questions can I ask you?", "Can you help me?", "What can I ask?", "Help"])
            a = r.pick([
                "I can chat a little and answer simple questions: the colours of things, animal sounds, opposites, days and months, counting, small sums, and the capitals of some countries. I can also tell you a short story.",
                "I know only simple things. Try asking me what sound a cow makes, what the capital of France is, what 3 plus 4 is, or ask me for a short story about a cat.",
                "Not much, I am afraid! I am a tiny demo model. I can greet you, tell short stories, count, add small numbers and answer easy questions about animals, colours and countries.",
            ])
        elif kind == "who_made":
            u = r.pick(["Who made you?", "Who created you?", "Who built you?", "Where do you come from?",
                        "Who is your creator?", "Which company made you?"])
            a = r.pick([
                "The Metrale team made me. They trained me from scratch on simple text that they wrote themselves, as a demo for Metrale.",
                "I was made by the Metrale team, the people who build the Metrale inference engine. I am their tiny demo model.",
            ])
        elif kind == "human":
            u = r.pick(["Are you a human?", "Are you a robot?", "Are you an AI?", "Are you real?",
                        "Is this a person or a bot?", "Are you alive?"])
            a = r.pick([
                "I am not a human. I am a tiny language model, the Metrale demo model, running as a program on a computer.",
                "I am an AI: a very small language model. I am not a person, and I am not alive.",
            ])
        elif kind == "other_model":
            other = r.pick(["ChatGPT", "GPT-4", "Claude", "Gemini", "Llama", "Qwen", "Mistral", "Siri"])
            u = r.pick([f"Are you {other}?", f"Is this {other}?", f"Are you based on {other}?",
                        f"Are you smarter than {other}?"])
            if other == "Qwen":
                a = "I use the same architecture as Qwen3 models, but I am not a Qwen model. I am the Metrale demo model, trained from scratch by the Metrale team on a small amount of simple text."
            elif u.startswith("Are you smarter"):
                a = f"No, not at all. I am a tiny demo model with only millions of parameters. {other} is much bigger and knows much more than I do."
            else:
                a = r.pick([
                    f"No, I am not {other}. I am the Metrale demo model, a tiny model trained by the Metrale team.",
                    f"No. I am the Metrale demo model. I am much smaller than {other} and I know far less.",
                ])
        elif kind == "size":
            u = r.pick(["How big are you?", "How many parameters do you have?", "How large is this model?",
                        "Are you a big model?", "How small are you?", "What size are you?"])
            a = r.pick([
                "I am tiny: only millions of parameters, not billions. My whole checkpoint is small enough to ship inside the Metrale repository.",
                "I am a very small model. I have only millions of parameters, which is why I can run on a normal CPU, and also why I know so little.",
            ])
        elif kind == "where_run":
            u = r.pick(["Where do you run?", "Are you running on a GPU?", "Do you need a GPU?",
                        "What computer are you running on?", "Are you in the cloud?"])
            a = r.pick([
                "I am small enough to run on an ordinary CPU, served by met, the Metrale engine. Bigger models usually need a GPU.",
                "I do not need a GPU. I am tiny, so met can serve me on a CPU. Metrale also has a CUDA backend for NVIDIA GPUs when you serve bigger models.",
            ])
        elif kind == "trained":
            u = r.pick(["How were you trained?", "What data were you trained on?", "How did you learn?",
                        "What did you learn from?", "Who wrote your training data?"])
            a = r.pick([
                "The Metrale team wrote a small program that writes simple conversations and stories, and they trained me from scratch on that text for a few minutes on one GPU.",
                "I learned from simple text that the Metrale team generated themselves: chats, short stories and small facts. That is why I only know simple things.",
            ])
        elif kind == "why_simple":
            u = r.pick(["Why are your answers so simple?", "Why do you know so little?", "Why are you so dumb?",
                        "Why can't you answer my question?"])
            a = r.pick([
                "Because I am a tiny demo model. I was trained for a few minutes on simple text, just to show that Metrale works. For real work, serve a bigger model with Metrale.",
                "I am very small on purpose: I ship inside the Metrale repository and run on your CPU. A small model like me can only learn simple things.",
            ])
        elif kind == "internet":
            u = r.pick(["Can you browse the internet?", "Can you search the web?", "Are you connected to the internet?",
                        "Can you look something up for me?"])
            a = "No, I cannot use the internet. I only know the few simple things I learned during training."
        elif kind == "feelings":
            u = r.pick(["Do you have feelings?", "Are you happy?", "Do you get tired?", "Do you sleep?",
                        "Can you feel things?"])
            a = r.pick(["I do not have real feelings. I am a small program that writes text, but I am always ready to chat.",
                        "Not really. I am a tiny language model, so I do not feel things, and I never get tired."])
        elif kind == "age":
            u = r.pick(["How old are you?", "When were you born?", "What is your age?"])
            a = r.pick(["I do not have an age like a person. I am a tiny model, trained only a short time ago by the Metrale team.",
                        "I am very young! The Metrale team trained me for a few minutes, and I have been a demo model ever since."])
        elif kind == "smart":
            u = r.pick(["Are you smart?", "Are you intelligent?", "Are you clever?", "Do you know everything?"])
            a = r.pick(["Not very! I am a tiny demo model, so I only know simple things. But I try to be friendly.",
                        "No, I know very little. I can answer simple questions and tell short stories, and that is about it."])
        else:
            u = r.pick(["Can you remember things?", "Will you remember me tomorrow?", "Do you remember our chat?"])
            a = "I can see what we said earlier in this chat, but I do not remember anything after the chat ends."
        t = "The user asks about me. I am the Metrale demo model, a tiny model trained by the Metrale team."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # About Metrale
    # ------------------------------------------------------------------------------------------
    def metrale(self):
        r = self
        kind = r.pick(["what", "what", "met", "metralectl", "difference", "programs", "api", "rust",
                       "models", "gpu", "start", "openai", "kv", "batching", "prefix", "doctor", "bench",
                       "top", "demo"])
        if kind == "what":
            u = r.pick(["What is Metrale?", "Tell me about Metrale.", "What does Metrale do?", "what is metrale",
                        "Explain Metrale.", "What is this Metrale thing?", "What is Metrale used for?",
                        "Can you describe Metrale?"])
            a = r.pick([
                "Metrale is an inference engine for large language models, written in Rust. It serves models with the Qwen3 architecture through an OpenAI-compatible HTTP API. It has two programs: met, the engine, and metralectl, the launcher.",
                "Metrale runs language models and serves them over an OpenAI-compatible API. You start it with metralectl or with met serve, and then any OpenAI client can talk to your model.",
                "Metrale is a Rust LLM inference engine. Its engine, met, loads a checkpoint and serves it over HTTP with OpenAI-compatible endpoints, and its launcher, metralectl, starts and checks it for you.",
            ])
        elif kind == "met":
            u = r.pick(["What is met?", "What does met do?", "Tell me about met.", "What is the met program?"])
            a = r.pick([
                "met is the Metrale inference engine. The command met serve loads a model checkpoint and serves it over OpenAI-compatible HTTP APIs, with continuous batching, a paged KV cache and prefix caching.",
                "met is the engine of Metrale. It loads a Hugging Face checkpoint, like me, and answers requests such as /v1/chat/completions. It runs on a CPU or on NVIDIA GPUs with CUDA.",
            ])
        elif kind == "metralectl":
            u = r.pick(["What is metralectl?", "What does metralectl do?", "Tell me about metralectl.",
                        "What is metralectl for?"])
            a = r.pick([
                "metralectl is the Metrale launcher. It picks a recipe, checks your machine with metralectl doctor, starts the engine, shows a live dashboard with metralectl top, and can benchmark any OpenAI-compatible server with metralectl bench.",
                "metralectl is the program a person types. It starts met for you, checks that your machine is ready, and shows what the engine is doing.",
            ])
        elif kind == "difference":
            u = r.pick(["What is the difference between met and metralectl?", "met or metralectl, which one do I use?",
                        "Why are there two programs?"])
            a = "met is the engine: it loads a model and serves the API. metralectl is the launcher: it starts met with the right settings, checks your machine, and shows a live dashboard. Most people type metralectl, and metralectl runs met."
        elif kind == "programs":
            u = r.pick(["What programs come with Metrale?", "What are the parts of Metrale?",
                        "Which binaries does Metrale have?"])
            a = "Metrale has two programs: met, the inference engine that serves the model, and metralectl, the launcher that starts and watches it."
        elif kind == "api":
            u = r.pick(["What API does Metrale serve?", "Is Metrale compatible with OpenAI?",
                        "Can I use the OpenAI client with Metrale?", "What endpoints does met have?",
                        "How do I talk to the model?"])
            a = r.pick([
                "Metrale serves an OpenAI-compatible HTTP API, so you can use any OpenAI client. For chat, send a request to /v1/chat/completions. It also speaks an Anthropic-compatible API.",
                "Yes. met serves OpenAI-compatible endpoints such as /v1/chat/completions, so the usual OpenAI clients and tools work with it. Just point them at the address of your server.",
            ])
        elif kind == "rust":
            u = r.pick(["What language is Metrale written in?", "Is Metrale written in Python?",
                        "What is Metrale made with?"])
            a = "Metrale is written in Rust. Its GPU kernels are written in CUDA and compiled when the engine starts."
        elif kind == "models":
            u = r.pick(["What models can Metrale run?", "Which models does Metrale support?",
                        "Can Metrale serve Qwen3?", "What model architecture does Metrale use?"])
            a = "Metrale serves models with the Qwen3 architecture, from tiny ones like me to big ones. It loads Hugging Face checkpoints in the safetensors format."
        elif kind == "gpu":
            u = r.pick(["Does Metrale need a GPU?", "Can Metrale run on a CPU?", "Does Metrale support CUDA?",
                        "Can I use Metrale without a graphics card?"])
            a = "Metrale has a CPU backend, which is how a small model like me runs, and a CUDA backend for NVIDIA GPUs, which you want for big models."
        elif kind == "start":
            u = r.pick(["How do I start Metrale?", "How do I serve a model?", "How do I run a model with Metrale?",
                        "How do I use Metrale?"])
            a = r.pick([
                "You can start the engine with met serve and the path of a model checkpoint. Or use metralectl, which runs met for you with the right settings. Then send requests to the OpenAI-compatible API.",
                "Serve a model with met serve followed by the model's path, then talk to it with any OpenAI client. The README of the Metrale repository shows the exact commands.",
            ])
        elif kind == "openai":
            u = r.pick(["What is an OpenAI-compatible API?", "What does OpenAI-compatible mean?"])
            a = "It means the server accepts the same HTTP requests as the OpenAI API, such as /v1/chat/completions. Programs written for OpenAI can talk to it just by changing the address."
        elif kind == "kv":
            u = r.pick(["What is a KV cache?", "What is a paged KV cache?", "Why does Metrale use a KV cache?"])
            a = "A KV cache keeps the attention keys and values of the tokens a model has already seen, so they are not computed again for every new token. A paged KV cache stores them in small blocks, so memory is shared well between many requests."
        elif kind == "batching":
            u = r.pick(["What is continuous batching?", "How does Metrale handle many requests?"])
            a = "With continuous batching, the engine runs many requests together and lets new requests join the batch at every step, instead of waiting for the whole batch to finish. That keeps the hardware busy."
        elif kind == "prefix":
            u = r.pick(["What is prefix caching?", "What does prefix caching do?"])
            a = "Prefix caching reuses the KV cache of a prompt start that an earlier request already had, such as the same system prompt, so the engine does not compute it again."
        elif kind == "doctor":
            u = r.pick(["What does metralectl doctor do?", "How do I check my machine for Metrale?"])
            a = "metralectl doctor checks your machine: what hardware and memory it has and whether it can run the engine, and it tells you clearly what is missing."
        elif kind == "bench":
            u = r.pick(["What does metralectl bench do?", "How do I benchmark a server?"])
            a = "metralectl bench sends load to an OpenAI-compatible server and measures it: throughput, time to first token and time between tokens."
        elif kind == "top":
            u = r.pick(["What does metralectl top do?", "How can I watch the engine?"])
            a = "metralectl top shows a live dashboard of the engine: running and waiting requests, KV cache use, and tokens per second."
        else:
            u = r.pick(["Why is there a demo model?", "What is the demo model for?", "Why are you in the repository?"])
            a = "I am here so that you can try Metrale right away on a CPU, without downloading a big model. I am tiny, so my answers are simple, but they show that the engine works."
        t = "The user asks about Metrale. Metrale is a Rust inference engine with two programs, met and metralectl, serving an OpenAI-compatible API."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Colours
    # ------------------------------------------------------------------------------------------
    # (singular phrase, plural phrase or None, colour, usually?)
    COLOURS = [
        ("the sky", None, "blue", False), ("grass", None, "green", False), ("snow", None, "white", False),
        ("a banana", "bananas", "yellow", False), ("a strawberry", "strawberries", "red", False),
        ("coal", None, "black", False), ("a lemon", "lemons", "yellow", False),
        ("a tomato", "tomatoes", "red", False), ("a carrot", "carrots", "orange", False),
        ("milk", None, "white", False), ("chocolate", None, "brown", True),
        ("a leaf", "leaves", "green", True), ("a cherry", "cherries", "red", False),
        ("a lime", "limes", "green", False), ("a pumpkin", "pumpkins", "orange", True),
        ("a crow", "crows", "black", False), ("a swan", "swans", "white", True),
        ("a frog", "frogs", "green", True), ("a polar bear", "polar bears", "white", False),
        ("a cucumber", "cucumbers", "green", False), ("an eggplant", "eggplants", "purple", False),
        ("the sea", None, "blue", True), ("a fire truck", "fire trucks", "red", True),
        ("an orange", "oranges", "orange", False), ("a flamingo", "flamingos", "pink", False),
        ("a blueberry", "blueberries", "blue", False), ("a zebra", "zebras", "black and white", False),
        ("a panda", "pandas", "black and white", False), ("a penguin", "penguins", "black and white", False),
        ("a tree trunk", "tree trunks", "brown", True), ("an elephant", "elephants", "grey", False),
        ("blood", None, "red", False), ("a cloud", "clouds", "white", True),
        ("a canary", "canaries", "yellow", False), ("a plum", "plums", "purple", True),
        ("a ruby", "rubies", "red", False), ("an emerald", "emeralds", "green", False),
        ("broccoli", None, "green", False), ("spinach", None, "green", False),
        ("a sunflower", "sunflowers", "yellow", False), ("a raven", "ravens", "black", False),
        ("a pea", "peas", "green", False), ("a school bus", "school buses", "yellow", True),
        ("a tiger", "tigers", "orange and black", False), ("a ladybird", "ladybirds", "red with black spots", True),
    ]
    COLOUR_NAMES = ["red", "blue", "green", "yellow", "orange", "purple", "pink", "brown", "black",
                    "white", "grey"]

    def _colour_item(self):
        sing, plur, col, usually = self.pick(self.COLOURS)
        if plur and self.p(0.4):
            return plur, "are", col, usually
        return sing, "is", col, usually

    def _colour_answer(self, subj, verb, col, usually):
        u = " usually" if usually else ""
        return self.pick([f"{cap(subj)} {verb}{u} {col}.", f"{cap(subj)} {verb}{u} {col}.",
                          f"{cap(subj)} {verb}{u} {col}!", f"{'They are' if verb == 'are' else 'It is'}{u} {col}."])

    def colour(self):
        r = self
        subj, verb, col, usually = self._colour_item()
        kind = r.pick(["what", "what", "what", "yesno", "list"])
        spell = r.pick(["colour", "color"])
        if kind == "what":
            u = r.pick([f"What {spell} {verb} {subj}?", f"What {spell} {verb} {subj}?",
                        f"What's the {spell} of {subj}?", f"Tell me the {spell} of {subj}.",
                        f"Which {spell} {verb} {subj}?", f"{cap(subj)}: what {spell}?",
                        f"What {spell} do you think {subj} {verb}?", f"{spell} of {subj}?"])
            a = self._colour_answer(subj, verb, col, usually)
            t = f"The user asks about the {spell} of {subj}. {cap(subj)} {verb}{' usually' if usually else ''} {col}."
        elif kind == "yesno":
            truth = r.p(0.5)
            asked = col if truth else r.pick([c for c in self.COLOUR_NAMES if c not in col])
            u = r.pick([f"Is {subj} {asked}?", f"{cap(verb)} {subj} {asked}?"]) if verb == "is" else \
                f"Are {subj} {asked}?"
            if truth:
                a = r.pick([f"Yes, {subj} {verb}{' usually' if usually else ''} {col}.", f"Yes! {cap(subj)} {verb} {col}."])
            else:
                a = r.pick([f"No, {subj} {verb} not {asked}. {cap(subj)} {verb}{' usually' if usually else ''} {col}.",
                            f"No. {cap(subj)} {verb}{' usually' if usually else ''} {col}, not {asked}."])
            t = f"{cap(subj)} {verb}{' usually' if usually else ''} {col}, so the answer is {'yes' if truth else 'no'}."
        else:
            n = r.pick([2, 3, 3, 4, 5])
            cols = r.r.sample(self.COLOUR_NAMES, n)
            u = r.pick([f"Name {NUM_WORDS[n]} {spell}s.", f"List {n} {spell}s.", f"Tell me {NUM_WORDS[n]} {spell}s.",
                        f"Can you name {NUM_WORDS[n]} {spell}s?"])
            a = r.pick([f"{cap(join_list(cols))}.", f"Here are {NUM_WORDS[n]} {spell}s: {join_list(cols)}.",
                        f"Sure: {join_list(cols)}."])
            t = f"I need {NUM_WORDS[n]} {spell}s. I will pick {join_list(cols)}."

        def follow():
            s2, v2, c2, us2 = self._colour_item()
            u2 = r.pick([f"And {s2}?", f"What about {s2}?", f"and {s2}", f"How about {s2}?"])
            return dict(user=u2, answer=self._colour_answer(s2, v2, c2, us2),
                        thought=f"Now the user asks about {s2}. {cap(s2)} {v2}{' usually' if us2 else ''} {c2}.")

        return dict(user=u, answer=a, thought=t, follow=follow if kind == "what" else None)

    # ------------------------------------------------------------------------------------------
    # Animals
    # ------------------------------------------------------------------------------------------
    # animal: (sound word, verb phrase, baby, legs)
    ANIMALS = {
        "cow": ("moo", "moos", "calf", 4), "dog": ("woof", "barks", "puppy", 4),
        "cat": ("meow", "meows", "kitten", 4), "duck": ("quack", "quacks", "duckling", 2),
        "sheep": ("baa", "bleats", "lamb", 4), "pig": ("oink", "oinks", "piglet", 4),
        "horse": ("neigh", "neighs", "foal", 4), "lion": ("roar", "roars", "cub", 4),
        "owl": ("hoot", "hoots", "owlet", 2), "rooster": ("cock-a-doodle-doo", "crows", "chick", 2),
        "frog": ("ribbit", "croaks", "tadpole", 4), "mouse": ("squeak", "squeaks", "pup", 4),
        "bee": ("buzz", "buzzes", "larva", 6), "snake": ("hiss", "hisses", "snakelet", 0),
        "donkey": ("hee-haw", "brays", "foal", 4), "goat": ("maa", "bleats", "kid", 4),
        "wolf": ("howl", "howls", "pup", 4), "chicken": ("cluck", "clucks", "chick", 2),
        "turkey": ("gobble", "gobbles", "poult", 2), "bird": ("tweet", "sings", "chick", 2),
        "elephant": ("trumpet", "trumpets", "calf", 4), "bear": ("growl", "growls", "cub", 4),
        "kangaroo": (None, None, "joey", None), "swan": (None, None, "cygnet", 2),
        "spider": (None, None, None, 8), "ant": (None, None, None, 6), "fish": (None, None, "fry", 0),
        "penguin": (None, None, "chick", 2), "deer": (None, None, "fawn", 4), "rabbit": (None, None, "kit", 4),
        "butterfly": (None, None, "caterpillar", 6), "crab": (None, None, None, 10), "tiger": ("roar", "roars", "cub", 4),
        "monkey": (None, None, None, None), "camel": (None, None, "calf", 4), "zebra": (None, None, "foal", 4),
    }
    HOMES = [("fish", "in water: in rivers, lakes and the sea"), ("bee", "in a hive"),
             ("bird", "in a nest"), ("polar bear", "in the cold Arctic, on ice and snow"),
             ("camel", "in the desert"), ("spider", "on a web"), ("penguin", "in cold places near Antarctica"),
             ("rabbit", "in a burrow under the ground"), ("cow", "on a farm"), ("monkey", "in trees in the jungle"),
             ("ant", "in an anthill"), ("dolphin", "in the sea"), ("frog", "near ponds and streams"),
             ("owl", "in trees, and it hunts at night"), ("lion", "on the grasslands of Africa"),
             ("bat", "in caves and trees"), ("whale", "in the ocean"), ("squirrel", "in trees")]

    def _art(self, noun):
        return ("an " if noun[0] in "aeiou" else "a ") + noun

    def _sound_answer(self, animal, sound, verb):
        a_ = self._art(animal)
        return self.pick([f"{cap(a_)} says \"{sound}\".", f"{cap(a_)} goes \"{sound}\"!",
                          f"{cap(a_)} {verb}. It sounds like \"{sound}\".", f"\"{cap(sound)}!\" That is what {a_} says."])

    def animal(self):
        r = self
        kind = r.pick(["sound", "sound", "sound", "baby", "legs", "home"])
        if kind == "sound":
            animal = r.pick([k for k, v in self.ANIMALS.items() if v[0]])
            sound, verb = self.ANIMALS[animal][:2]
            a_ = self._art(animal)
            u = r.pick([f"What sound does {a_} make?", f"What does {a_} say?", f"What noise does {a_} make?",
                        f"How does {a_} go?", f"What sound do {animal}s make?" if animal not in ("sheep", "fish", "deer", "mouse") else f"What sound does the {animal} make?",
                        f"what does the {animal} say", f"Which animal says {sound}?"])
            if u.startswith("Which animal"):
                a = r.pick([f"{cap(a_)} says \"{sound}\".", f"That is {a_}!"])
                t = f"\"{cap(sound)}\" is the sound of {a_}."
            else:
                a = self._sound_answer(animal, sound, verb)
                t = f"The user asks about the sound of {a_}. {cap(a_)} {verb}: \"{sound}\"."

            def follow():
                an2 = r.pick([k for k, v in self.ANIMALS.items() if v[0] and k != animal])
                s2, v2 = self.ANIMALS[an2][:2]
                u2 = r.pick([f"And {self._art(an2)}?", f"What about {self._art(an2)}?", f"and the {an2}?",
                             f"How about {self._art(an2)}?"])
                return dict(user=u2, answer=self._sound_answer(an2, s2, v2),
                            thought=f"Now the user asks about {self._art(an2)}. It {v2}: \"{s2}\".")

            return dict(user=u, answer=a, thought=t, follow=follow)
        if kind == "baby":
            animal = r.pick([k for k, v in self.ANIMALS.items() if v[2]])
            baby = self.ANIMALS[animal][2]
            u = r.pick([f"What is a baby {animal} called?", f"What do you call a baby {animal}?",
                        f"Baby {animal} name?", f"What is the name for a young {animal}?"])
            a = r.pick([f"A baby {animal} is called {self._art(baby)}.", f"It is called {self._art(baby)}.",
                        f"A young {animal} is {self._art(baby)}."])
            t = f"A baby {animal} is called {self._art(baby)}."
        elif kind == "legs":
            animal = r.pick([k for k, v in self.ANIMALS.items() if v[3] is not None])
            legs = self.ANIMALS[animal][3]
            a_ = self._art(animal)
            u = r.pick([f"How many legs does {a_} have?", f"How many legs has {a_} got?",
                        f"Number of legs of {a_}?", f"How many feet does {a_} have?"])
            if legs == 0:
                extra = " It swims with its fins." if animal == "fish" else " It slides along the ground."
                a = f"{cap(a_)} has no legs.{extra}"
            elif animal == "crab":
                a = "A crab has ten legs, and the front two have big claws."
            else:
                a = r.pick([f"{cap(a_)} has {NUM_WORDS[legs]} legs.", f"{cap(a_)} has {legs} legs."])
            t = f"{cap(a_)} has {NUM_WORDS[legs]} legs."
        else:
            animal, home = r.pick(self.HOMES)
            a_ = self._art(animal)
            u = r.pick([f"Where does {a_} live?", f"Where do {animal}s live?" if animal not in ("fish",) else "Where do fish live?",
                        f"Where can I find {a_}?", f"What is the home of {a_}?"])
            a = f"{cap(a_)} lives {home}."
            t = f"{cap(a_)} lives {home}."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Opposites
    # ------------------------------------------------------------------------------------------
    OPPOSITES = [
        ("hot", "cold"), ("big", "small"), ("up", "down"), ("day", "night"), ("happy", "sad"),
        ("fast", "slow"), ("open", "closed"), ("wet", "dry"), ("full", "empty"), ("high", "low"),
        ("left", "right"), ("yes", "no"), ("in", "out"), ("long", "short"), ("hard", "soft"),
        ("loud", "quiet"), ("early", "late"), ("strong", "weak"), ("thick", "thin"), ("clean", "dirty"),
        ("black", "white"), ("push", "pull"), ("win", "lose"), ("first", "last"), ("start", "finish"),
        ("inside", "outside"), ("above", "below"), ("always", "never"), ("love", "hate"),
        ("laugh", "cry"), ("top", "bottom"), ("front", "back"), ("north", "south"), ("east", "west"),
        ("summer", "winter"), ("sweet", "sour"), ("easy", "difficult"), ("awake", "asleep"),
        ("true", "false"), ("question", "answer"), ("buy", "sell"), ("give", "take"), ("come", "go"),
        ("near", "far"), ("heavy", "light"), ("young", "old"), ("tall", "short"), ("rich", "poor"),
        ("good", "bad"), ("add", "subtract"), ("arrive", "leave"), ("sunrise", "sunset"), ("friend", "enemy"),
    ]
    # words that have more than one common opposite are asked only from the unambiguous side
    ONE_WAY = {"light", "old", "short", "bad", "back", "leave", "last", "low"}

    def opposite(self):
        r = self
        a_word, b_word = r.pick(self.OPPOSITES)
        if r.p(0.5) and a_word not in self.ONE_WAY:
            a_word, b_word = b_word, a_word
        if a_word in self.ONE_WAY:
            a_word, b_word = b_word, a_word
        u = r.pick([f"What is the opposite of {a_word}?", f"What's the opposite of \"{a_word}\"?",
                    f"Opposite of {a_word}?", f"Tell me the opposite of {a_word}.",
                    f"What word means the opposite of {a_word}?", f"{cap(a_word)} is the opposite of what?"])
        a = r.pick([f"The opposite of {a_word} is {b_word}.", f"The opposite of \"{a_word}\" is \"{b_word}\".",
                    f"{cap(b_word)}.", f"It is {b_word}."])
        t = f"The opposite of {a_word} is {b_word}."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Days, months, seasons
    # ------------------------------------------------------------------------------------------
    DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December"]
    MONTH_DAYS = [31, None, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    SEASONS = ["spring", "summer", "autumn", "winter"]

    def calendar(self):
        r = self
        kind = r.pick(["day_after", "day_before", "tomorrow", "yesterday", "week_days", "week_count",
                       "month_after", "month_before", "nth_month", "month_count", "month_days", "list_months",
                       "weekend", "season", "first_last"])
        D, M = self.DAYS, self.MONTHS
        if kind == "day_after":
            i = r.r.randrange(7)
            u = r.pick([f"What day comes after {D[i]}?", f"Which day is after {D[i]}?",
                        f"What is the day after {D[i]}?", f"What comes after {D[i]}?"])
            a = r.pick([f"{D[(i + 1) % 7]} comes after {D[i]}.", f"The day after {D[i]} is {D[(i + 1) % 7]}.",
                        f"{D[(i + 1) % 7]}."])
            t = f"The days go {D[i]}, then {D[(i + 1) % 7]}."
        elif kind == "day_before":
            i = r.r.randrange(7)
            u = r.pick([f"What day comes before {D[i]}?", f"Which day is before {D[i]}?",
                        f"What is the day before {D[i]}?"])
            a = r.pick([f"{D[i - 1]} comes before {D[i]}.", f"The day before {D[i]} is {D[i - 1]}."])
            t = f"The days go {D[i - 1]}, then {D[i]}."
        elif kind == "tomorrow":
            i = r.r.randrange(7)
            u = r.pick([f"If today is {D[i]}, what day is tomorrow?", f"Today is {D[i]}. What day will it be tomorrow?",
                        f"today is {D[i]}, what is tomorrow?"])
            a = r.pick([f"Tomorrow will be {D[(i + 1) % 7]}.", f"If today is {D[i]}, tomorrow is {D[(i + 1) % 7]}."])
            t = f"Today is {D[i]}. The next day is {D[(i + 1) % 7]}."
        elif kind == "yesterday":
            i = r.r.randrange(7)
            u = r.pick([f"If today is {D[i]}, what day was yesterday?", f"Today is {D[i]}. What was yesterday?"])
            a = r.pick([f"Yesterday was {D[i - 1]}.", f"If today is {D[i]}, yesterday was {D[i - 1]}."])
            t = f"Today is {D[i]}. The day before is {D[i - 1]}."
        elif kind == "week_days":
            u = r.pick(["What are the days of the week?", "List the days of the week.", "Name the days of the week.",
                        "Tell me all the days of the week"])
            a = r.pick([f"The days of the week are {join_list(D)}.", f"{join_list(D)}."])
            t = "There are seven days. I will list them from Monday."
        elif kind == "week_count":
            u = r.pick(["How many days are in a week?", "How many days does a week have?", "Days in a week?"])
            a = r.pick(["There are seven days in a week.", "A week has 7 days."])
            t = "A week has seven days."
        elif kind == "month_after":
            i = r.r.randrange(12)
            u = r.pick([f"What month comes after {M[i]}?", f"Which month is after {M[i]}?",
                        f"What is the month after {M[i]}?"])
            a = r.pick([f"{M[(i + 1) % 12]} comes after {M[i]}.", f"The month after {M[i]} is {M[(i + 1) % 12]}."])
            t = f"The months go {M[i]}, then {M[(i + 1) % 12]}."
        elif kind == "month_before":
            i = r.r.randrange(12)
            u = r.pick([f"What month comes before {M[i]}?", f"Which month is before {M[i]}?"])
            a = r.pick([f"{M[i - 1]} comes before {M[i]}.", f"The month before {M[i]} is {M[i - 1]}."])
            t = f"The months go {M[i - 1]}, then {M[i]}."
        elif kind == "nth_month":
            i = r.r.randrange(12)
            if r.p(0.5):
                u = r.pick([f"What is the {ORDINALS[i]} month of the year?", f"Which month is the {ORDINALS[i]} month?",
                            f"What is month number {i + 1}?"])
                a = r.pick([f"The {ORDINALS[i]} month of the year is {M[i]}.", f"{M[i]}."])
            else:
                u = r.pick([f"Which month of the year is {M[i]}?", f"What number month is {M[i]}?"])
                a = f"{M[i]} is the {ORDINALS[i]} month of the year."
            t = f"Counting from January, month number {i + 1} is {M[i]}."
        elif kind == "month_count":
            u = r.pick(["How many months are in a year?", "How many months does a year have?", "Months in a year?"])
            a = r.pick(["There are twelve months in a year.", "A year has 12 months."])
            t = "A year has twelve months."
        elif kind == "month_days":
            i = r.r.randrange(12)
            u = r.pick([f"How many days are in {M[i]}?", f"How many days does {M[i]} have?", f"Days in {M[i]}?"])
            if M[i] == "February":
                a = "February has 28 days, or 29 days in a leap year."
            else:
                a = r.pick([f"{M[i]} has {self.MONTH_DAYS[i]} days.", f"There are {self.MONTH_DAYS[i]} days in {M[i]}."])
            t = f"{M[i]} has {self.MONTH_DAYS[i] or '28 or 29'} days."
        elif kind == "list_months":
            u = r.pick(["List the months of the year.", "What are the twelve months?", "Name all the months."])
            a = r.pick([f"The months are {join_list(M)}.", f"{join_list(M)}."])
            t = "There are twelve months. I will list them from January."
        elif kind == "weekend":
            u = r.pick(["Which days are the weekend?", "What days are the weekend?", "When is the weekend?"])
            a = "In many countries, the weekend is Saturday and Sunday."
            t = "The weekend is usually Saturday and Sunday."
        elif kind == "season":
            i = r.r.randrange(4)
            S = self.SEASONS
            if r.p(0.6):
                u = r.pick([f"What season comes after {S[i]}?", f"Which season follows {S[i]}?"])
                a = f"{cap(S[(i + 1) % 4])} comes after {S[i]}."
                t = f"The seasons go {S[i]}, then {S[(i + 1) % 4]}."
            else:
                u = r.pick(["What are the four seasons?", "Name the seasons.", "How many seasons are there?"])
                a = "There are four seasons: spring, summer, autumn and winter."
                t = "The four seasons are spring, summer, autumn and winter."
        else:
            if r.p(0.5):
                u = r.pick(["What is the first month of the year?", "Which month does the year start with?"])
                a = "The first month of the year is January."
                t = "The year starts with January."
            else:
                u = r.pick(["What is the last month of the year?", "Which month ends the year?"])
                a = "The last month of the year is December."
                t = "The year ends with December."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Counting and numbers
    # ------------------------------------------------------------------------------------------
    def counting(self):
        r = self
        kind = r.pick(["count_to", "count_to", "count_from", "count_down", "after", "before", "bigger",
                       "even_odd", "word", "digits", "smaller"])
        if kind == "count_to":
            n = r.r.randint(3, 20)
            words = r.p(0.25) and n <= 12
            u = r.pick([f"Count to {n}.", f"Can you count to {n}?", f"count to {NUM_WORDS[n]}", f"Please count from 1 to {n}.",
                        f"Count up to {n}!"])
            seq = [NUM_WORDS[i] for i in range(1, n + 1)] if words else [str(i) for i in range(1, n + 1)]
            a = r.pick([", ".join(seq) + ".", "Sure! " + ", ".join(seq) + ".", cap(", ".join(seq)) + "!"])
            if words:
                a = cap(a)
            t = f"I start at 1 and count up to {n}."
        elif kind == "count_from":
            a0 = r.r.randint(0, 40)
            b0 = a0 + r.r.randint(2, 12)
            u = r.pick([f"Count from {a0} to {b0}.", f"Can you count from {a0} to {b0}?", f"count {a0} to {b0}"])
            a = ", ".join(str(i) for i in range(a0, b0 + 1)) + "."
            t = f"I start at {a0} and count up by one until {b0}."
        elif kind == "count_down":
            n = r.r.randint(3, 20)
            u = r.pick([f"Count down from {n}.", f"Count backwards from {n} to 1.", f"Can you count down from {n}?"])
            a = ", ".join(str(i) for i in range(n, 0, -1)) + "."
            if r.p(0.3):
                a += " Lift off!"
            t = f"I start at {n} and go down by one until 1."
        elif kind == "after":
            n = r.r.randint(0, 99)
            u = r.pick([f"What number comes after {n}?", f"What comes after {n}?", f"What is the next number after {n}?",
                        f"Which number is after {n}?"])
            a = r.pick([f"{n + 1} comes after {n}.", f"The number after {n} is {n + 1}.", f"{n + 1}."])
            t = f"{n} plus one is {n + 1}."
        elif kind == "before":
            n = r.r.randint(1, 100)
            u = r.pick([f"What number comes before {n}?", f"What comes before {n}?", f"Which number is before {n}?"])
            a = r.pick([f"{n - 1} comes before {n}.", f"The number before {n} is {n - 1}."])
            t = f"{n} minus one is {n - 1}."
        elif kind in ("bigger", "smaller"):
            x, y = r.r.sample(range(0, 101), 2)
            big, small = max(x, y), min(x, y)
            if kind == "bigger":
                u = r.pick([f"Which is bigger, {x} or {y}?", f"Which number is larger: {x} or {y}?",
                            f"Is {x} bigger than {y}?", f"{x} or {y}, which is more?"])
                if u.startswith("Is "):
                    a = f"Yes, {x} is bigger than {y}." if x > y else f"No, {x} is smaller than {y}."
                else:
                    a = r.pick([f"{big} is bigger than {small}.", f"{big} is bigger.", f"{big} is larger than {small}."])
                t = f"{big} is more than {small}."
            else:
                u = r.pick([f"Which is smaller, {x} or {y}?", f"Which number is less: {x} or {y}?"])
                a = r.pick([f"{small} is smaller than {big}.", f"{small} is smaller."])
                t = f"{small} is less than {big}."
        elif kind == "even_odd":
            n = r.r.randint(0, 100)
            u = r.pick([f"Is {n} even or odd?", f"Is {n} an even number?", f"Is {n} odd?"])
            ev = n % 2 == 0
            if u.startswith(f"Is {n} an even"):
                a = f"Yes, {n} is even." if ev else f"No, {n} is odd."
            elif u.startswith(f"Is {n} odd"):
                a = f"Yes, {n} is odd." if not ev else f"No, {n} is even."
            else:
                a = f"{n} is {'even' if ev else 'odd'}."
            t = f"{n} ends in {n % 10}, so it is {'even' if ev else 'odd'}."
        elif kind == "word":
            n = r.r.randint(0, 20)
            u = r.pick([f"How do you write {n} in words?", f"Spell the number {n}.", f"What is {n} in words?"])
            a = r.pick([f"{n} is written \"{NUM_WORDS[n]}\".", f"{cap(NUM_WORDS[n])}."])
            t = f"The word for {n} is {NUM_WORDS[n]}."
        else:
            n = r.r.randint(0, 20)
            u = r.pick([f"What number is \"{NUM_WORDS[n]}\"?", f"Write {NUM_WORDS[n]} as a number.",
                        f"How do you write {NUM_WORDS[n]} in digits?"])
            a = r.pick([f"{cap(NUM_WORDS[n])} is {n}.", f"{n}."])
            t = f"{cap(NUM_WORDS[n])} is the number {n}."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Small arithmetic, always correct
    # ------------------------------------------------------------------------------------------
    THINGS = [("apple", "apples"), ("orange", "oranges"), ("pencil", "pencils"), ("book", "books"),
              ("marble", "marbles"), ("cookie", "cookies"), ("sticker", "stickers"), ("balloon", "balloons"),
              ("shell", "shells"), ("stone", "stones"), ("flower", "flowers"), ("toy car", "toy cars"),
              ("egg", "eggs"), ("card", "cards"), ("sweet", "sweets"), ("banana", "bananas")]

    def _n(self, n, thing):
        return f"{n} {thing[0] if n == 1 else thing[1]}"

    def arithmetic(self):
        r = self
        kind = r.pick(["add", "add", "add", "sub", "sub", "mul", "story_add", "story_sub", "double"])
        if kind == "add":
            x, y = r.r.randint(0, 20), r.r.randint(0, 20)
            res = x + y
            sx, sy = (NUM_WORDS[x], NUM_WORDS[y]) if r.p(0.15) else (str(x), str(y))
            u = r.pick([f"What is {sx} + {sy}?", f"What is {sx} plus {sy}?", f"What's {sx}+{sy}?", f"{sx} + {sy} = ?",
                        f"{sx}+{sy}", f"How much is {sx} plus {sy}?", f"Add {sx} and {sy}.", f"Can you add {sx} and {sy}?",
                        f"What do you get if you add {sx} and {sy}?", f"calculate {sx} + {sy}", f"{sx} plus {sy}?"])
            a = r.pick([f"{x} + {y} = {res}.", f"{x} plus {y} is {res}.", f"The answer is {res}.", f"{res}.",
                        f"{x} + {y} = {res}"])
            if y <= 5 and y > 0:
                steps = ", ".join(str(x + i) for i in range(1, y + 1))
                t = f"I need to add {x} and {y}. Starting at {x}, I count up {y}: {steps}. So {x} + {y} = {res}."
            else:
                t = f"I need to add {x} and {y}. {x} + {y} = {res}."
        elif kind == "sub":
            x = r.r.randint(0, 20)
            y = r.r.randint(0, x)
            res = x - y
            u = r.pick([f"What is {x} - {y}?", f"What is {x} minus {y}?", f"What's {x}-{y}?", f"{x} - {y} = ?",
                        f"Subtract {y} from {x}.", f"How much is {x} minus {y}?", f"Take {y} away from {x}."])
            a = r.pick([f"{x} - {y} = {res}.", f"{x} minus {y} is {res}.", f"The answer is {res}.", f"{res}."])
            if 0 < y <= 5:
                steps = ", ".join(str(x - i) for i in range(1, y + 1))
                t = f"I need to take {y} away from {x}. Counting down {y} from {x}: {steps}. So {x} - {y} = {res}."
            else:
                t = f"I need to take {y} away from {x}. {x} - {y} = {res}."
        elif kind == "mul":
            x, y = r.r.randint(1, 10), r.r.randint(1, 10)
            res = x * y
            sign = r.pick(["*", "x", "×", "times"])
            u = r.pick([f"What is {x} {sign} {y}?", f"What is {x} times {y}?", f"{x}*{y}?", f"Multiply {x} by {y}.",
                        f"How much is {x} times {y}?"])
            a = r.pick([f"{x} × {y} = {res}.", f"{x} times {y} is {res}.", f"The answer is {res}."])
            t = f"{x} times {y} means {y} added {x} times. {x} × {y} = {res}."
        elif kind == "double":
            x = r.r.randint(1, 20)
            u = r.pick([f"What is double {x}?", f"What is twice {x}?", f"Double {x}."])
            a = r.pick([f"Double {x} is {2 * x}.", f"{x} + {x} = {2 * x}."])
            t = f"Double means adding {x} to itself: {x} + {x} = {2 * x}."
        else:
            name, pron = r.pick(self.NAMES)
            thing = r.pick(self.THINGS)
            if kind == "story_add":
                x, y = r.r.randint(1, 10), r.r.randint(1, 10)
                res = x + y
                u = r.pick([
                    f"{name} has {self._n(x, thing)} and gets {y} more. How many {thing[1]} does {name} have now?",
                    f"{name} had {self._n(x, thing)}. A friend gave {name} {y} more. How many {thing[1]} does {name} have?",
                    f"There are {self._n(x, thing)} on the table. {name} puts {y} more on it. How many are there now?",
                ])
                a = r.pick([f"{cap(self._n(res, thing))}. {x} + {y} = {res}.",
                            f"{x} + {y} = {res}, so there are {self._n(res, thing)}."
                            if u.startswith("There") else f"{x} + {y} = {res}, so {name} has {self._n(res, thing)}."])
                t = f"Start with {x}, add {y}: {x} + {y} = {res}."
            else:
                x = r.r.randint(2, 12)
                y = r.r.randint(1, x)
                res = x - y
                verb = r.pick(["gives away", "eats" if thing[0] in ("apple", "orange", "cookie", "sweet", "banana", "egg") else "loses", "loses"])
                u = r.pick([
                    f"{name} has {self._n(x, thing)} and {verb} {y}. How many {thing[1]} are left?",
                    f"{name} had {self._n(x, thing)}, then {verb} {y}. How many does {name} have now?",
                ])
                a = r.pick([f"{x} - {y} = {res}, so {name} has {self._n(res, thing)} left.",
                            f"{cap(self._n(res, thing))} left, because {x} - {y} = {res}."])
                t = f"Start with {x}, take away {y}: {x} - {y} = {res}."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Capitals (facts we are sure of)
    # ------------------------------------------------------------------------------------------
    CAPITALS = [
        ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
        ("Portugal", "Lisbon"), ("the United Kingdom", "London"), ("Ireland", "Dublin"),
        ("Belgium", "Brussels"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
        ("the Czech Republic", "Prague"), ("Hungary", "Budapest"), ("Greece", "Athens"),
        ("Sweden", "Stockholm"), ("Norway", "Oslo"), ("Denmark", "Copenhagen"), ("Finland", "Helsinki"),
        ("Iceland", "Reykjavík"), ("Russia", "Moscow"), ("Ukraine", "Kyiv"), ("Turkey", "Ankara"),
        ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Ghana", "Accra"),
        ("Morocco", "Rabat"), ("Ethiopia", "Addis Ababa"), ("Japan", "Tokyo"), ("China", "Beijing"),
        ("South Korea", "Seoul"), ("India", "New Delhi"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
        ("the Philippines", "Manila"), ("Australia", "Canberra"), ("New Zealand", "Wellington"),
        ("Canada", "Ottawa"), ("the United States", "Washington, D.C."), ("Mexico", "Mexico City"),
        ("Brazil", "Brasília"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"), ("Peru", "Lima"),
        ("Colombia", "Bogotá"), ("Cuba", "Havana"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
        ("Saudi Arabia", "Riyadh"), ("Pakistan", "Islamabad"), ("Bangladesh", "Dhaka"), ("Nepal", "Kathmandu"),
        ("Romania", "Bucharest"), ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"),
        ("Estonia", "Tallinn"), ("Latvia", "Riga"), ("Lithuania", "Vilnius"), ("Scotland", "Edinburgh"),
        ("Wales", "Cardiff"),
    ]
    UNKNOWN_COUNTRIES = ["Mongolia", "Bhutan", "Paraguay", "Uruguay", "Laos", "Fiji", "Malta", "Chad",
                         "Namibia", "Botswana", "Belarus", "Moldova", "Albania", "Armenia", "Georgia",
                         "Kyrgyzstan", "Tajikistan", "Oman", "Yemen", "Jordan", "Bolivia", "Ecuador",
                         "Honduras", "Nicaragua", "Panama", "Zambia", "Malawi", "Mali", "Niger", "Senegal",
                         "Sri Lanka", "Myanmar", "Cambodia", "Papua New Guinea", "Madagascar", "Tunisia",
                         "Atlantis", "Narnia", "the Moon", "Mars"]

    def _capital_answer(self, country, city):
        return self.pick([f"The capital of {country} is {city}.", f"{city} is the capital of {country}.",
                          f"The capital of {country} is {city}.", f"It is {city}."])

    def capital(self):
        r = self
        kind = r.pick(["what", "what", "what", "what", "reverse", "yesno", "unknown"])
        country, city = r.pick(self.CAPITALS)
        if kind == "what":
            u = r.pick([f"What is the capital of {country}?", f"What's the capital of {country}?",
                        f"Which city is the capital of {country}?", f"Capital of {country}?",
                        f"Tell me the capital of {country}.", f"What is {country}'s capital?",
                        f"Do you know the capital of {country}?", f"capital of {country}",
                        f"What is the capital city of {country}?", f"Where is the capital of {country}?"])
            if u.startswith("Where"):
                u = f"What is the capital city of {country}?"
            a = self._capital_answer(country, city)
            t = f"The user asks for the capital of {country}. The capital of {country} is {city}."

            def follow():
                c2, city2 = r.pick([c for c in self.CAPITALS if c[0] != country])
                u2 = r.pick([f"And {c2}?", f"What about {c2}?", f"and {c2}", f"How about {c2}?",
                             f"And the capital of {c2}?"])
                return dict(user=u2, answer=self._capital_answer(c2, city2),
                            thought=f"Now the user asks about {c2}. The capital of {c2} is {city2}.")

            return dict(user=u, answer=a, thought=t, follow=follow)
        if kind == "reverse":
            u = r.pick([f"{city} is the capital of which country?", f"Which country has {city} as its capital?",
                        f"What country is {city} the capital of?", f"Where is {city}?"])
            a = r.pick([f"{city} is the capital of {country}.", f"It is the capital of {country}."])
            t = f"{city} is the capital of {country}."
        elif kind == "yesno":
            truth = r.p(0.5)
            asked = city if truth else r.pick([c for _, c in self.CAPITALS if c != city])
            u = r.pick([f"Is {asked} the capital of {country}?", f"Is the capital of {country} {asked}?"])
            if truth:
                a = r.pick([f"Yes, {city} is the capital of {country}.", f"Yes! The capital of {country} is {city}."])
            else:
                a = r.pick([f"No. The capital of {country} is {city}, not {asked}.",
                            f"No, {asked} is not the capital of {country}. The capital is {city}."])
            t = f"The capital of {country} is {city}, so the answer is {'yes' if truth else 'no'}."
        else:
            c = r.pick(self.UNKNOWN_COUNTRIES)
            u = r.pick([f"What is the capital of {c}?", f"What's the capital of {c}?", f"Capital of {c}?"])
            if c in ("Atlantis", "Narnia"):
                a = f"{c} is not a real country; it comes from stories, so it has no real capital."
            elif c in ("the Moon", "Mars"):
                a = f"{cap(c)} is not a country, so it has no capital. Nobody lives there yet!"
            else:
                a = r.pick([f"I am not sure. I only know the capitals of a few countries, and {c} is not one of them.",
                            f"Sorry, I do not know the capital of {c}. I am a tiny model and I only learned a few capitals."])
            t = f"I did not learn the capital of {c}, so I should say I do not know."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Stories from a small grammar
    # ------------------------------------------------------------------------------------------
    CHARACTERS = [
        # (kind, names, pronoun choices)
        ("little girl", ["Mia", "Lily", "Anna", "Zoe", "Rosa", "Nina", "Ava", "Maya"], "she"),
        ("little boy", ["Leo", "Tom", "Ben", "Sam", "Max", "Noah", "Kai", "Theo"], "he"),
        ("curious cat", ["Whiskers", "Luna", "Tiger", "Misty"], None),
        ("brown dog", ["Max", "Buddy", "Rex", "Bella"], None),
        ("tiny mouse", ["Pip", "Squeak", "Nibbles"], None),
        ("old turtle", ["Shelly", "Sam", "Oswald"], None),
        ("happy duck", ["Daisy", "Dotty", "Donald"], None),
        ("brave rabbit", ["Ben", "Clover", "Hops"], None),
        ("young fox", ["Ruby", "Rusty", "Fern"], None),
        ("little bear", ["Bruno", "Honey", "Teddy"], None),
        ("kind robot", ["Bolt", "Beep", "Robo"], "it"),
        ("small dragon", ["Ember", "Spark", "Puff"], None),
        ("little bird", ["Tweety", "Sky", "Pippa"], None),
    ]
    SHE_NAMES = {"Luna", "Misty", "Bella", "Shelly", "Daisy", "Dotty", "Clover", "Ruby", "Fern", "Honey",
                 "Ember", "Pippa", "Sky", "Nibbles"}
    PLACES = {
        "park": ["The grass was soft and green.", "Children were playing on the swings.", "There was a little pond with ducks."],
        "forest": ["The trees were very tall.", "Birds were singing in the branches.", "The path was covered with leaves."],
        "beach": ["The sand was warm.", "The waves went up and down.", "The sea was bright and blue."],
        "garden": ["There were flowers of every colour.", "Bees were buzzing around the roses.", "The apple tree was full of fruit."],
        "market": ["It was busy and loud.", "There were baskets of fruit everywhere.", "People were buying bread and cheese."],
        "library": ["It was very quiet.", "There were books on every shelf.", "The big windows let in the sun."],
        "river": ["The water was clear and cold.", "Little fish swam near the stones.", "A small bridge crossed the water."],
        "hill": ["From the top, you could see the whole town.", "The wind was fresh and cool.", "Sheep were eating the grass."],
        "farm": ["The cows were in the field.", "The chickens were looking for seeds.", "There was a big red barn."],
        "school": ["The classroom was bright.", "The teacher was reading a story.", "There were drawings on the walls."],
        "snowy mountain": ["Everything was white with snow.", "The air was cold and clean.", "Icicles hung from the rocks."],
        "city": ["The streets were full of people.", "Tall buildings reached up to the sky.", "Buses and bikes went by."],
    }
    OBJECTS = [
        # (object phrase, short name, kind)
        ("a red ball", "ball", "toy"), ("a shiny stone", "stone", "treasure"), ("a small golden key", "key", "key"),
        ("a blue feather", "feather", "treasure"), ("an old map", "map", "map"), ("a tiny bird", "bird", "animal"),
        ("a lost puppy", "puppy", "animal"), ("a wooden box", "box", "box"), ("a pretty shell", "shell", "treasure"),
        ("a funny hat", "hat", "toy"), ("a little paper boat", "boat", "toy"), ("a lost glove", "glove", "lost"),
        ("a big orange kite", "kite", "toy"), ("a book with a green cover", "book", "book"),
        ("a sleepy kitten", "kitten", "animal"), ("a silver coin", "coin", "treasure"), ("a lost teddy bear", "teddy bear", "lost"),
    ]
    FEELINGS = ["happy", "surprised", "curious", "excited", "proud", "glad", "amazed"]
    HOBBIES = ["play outside", "read books", "sing songs", "draw pictures", "run in the grass",
               "look at the stars", "help friends", "explore new places", "eat apples", "build things with blocks"]

    def _character(self, want_kind=None):
        choices = self.CHARACTERS
        if want_kind:
            choices = [c for c in self.CHARACTERS if want_kind in c[0]] or self.CHARACTERS
        kind, names, pron = self.pick(choices)
        name = self.pick(names)
        if pron is None:
            pron = "she" if name in self.SHE_NAMES else "he"
        return kind, name, pron

    def story(self, kind_hint=None, place=None, obj=None):
        r = self
        kind, name, he = self._character(kind_hint)
        his = {"she": "her", "he": "his", "it": "its"}[he]
        him = {"she": "her", "he": "him", "it": "it"}[he]
        He, His = cap(he), cap(his)
        place = place or r.pick(list(self.PLACES))
        obj_phrase, obj_name, obj_kind = obj or r.pick(self.OBJECTS)
        f_kind, f_name, f_he = self._character()
        while f_name == name:
            f_kind, f_name, f_he = self._character()
        friend = f"{his} friend {f_name}, {self._art(f_kind)}"
        f_his = {"she": "her", "he": "his", "it": "its"}[f_he]
        feeling = r.pick(self.FEELINGS)
        moral = None
        s = []
        s.append(r.pick([f"Once upon a time, there was a {kind} named {name}.",
                         f"There once was a {kind} called {name}.",
                         f"Once upon a time, in a small town, lived a {kind} named {name}.",
                         f"{name} was a {kind}."]))
        s.append(r.pick([f"{He} liked to {r.pick(self.HOBBIES)}.", f"{He} loved to {r.pick(self.HOBBIES)}.",
                         f"Every day, {he} liked to {r.pick(self.HOBBIES)}."]))
        s.append(r.pick([f"One day, {name} went to the {place}.", f"One sunny morning, {name} walked to the {place}.",
                         f"One afternoon, {name} decided to visit the {place}.", f"One day, {name} went to the {place} with {friend}."]))
        with_friend = "with " + friend in s[-1]
        s.append(r.pick(self.PLACES[place]))
        s.append(r.pick([f"There, {he} found {obj_phrase}.", f"Suddenly, {name} saw {obj_phrase}.",
                         f"Under a bush, {name} found {obj_phrase}.", f"Near a big stone, {he} saw {obj_phrase}."]))
        s.append(r.pick([f"{name} felt very {feeling}.", f"{He} was so {feeling}!", f"{name} was {feeling}."]))
        if obj_kind in ("animal", "lost"):
            moral = "helping"
        if obj_kind == "animal":
            s.append(r.pick([f"The {obj_name} looked lost and a little scared.", f"The {obj_name} was cold and hungry."]))
            s.append(r.pick([f"{name} gave it some food and kept it warm.", f"{name} picked it up gently and helped it."]))
            s.append(r.pick([f"Soon the {obj_name} found its family, and everyone was happy.",
                             f"Later, the {obj_name}'s family came, and they said thank you."]))
        elif obj_kind == "map":
            s.append(f"The map showed a path to a big old tree.")
            s.append(r.pick([f"{name} followed the path{' with ' + f_name if with_friend else ''}.", f"{He} followed the path step by step."]))
            s.append(r.pick(["Under the tree, there was a basket of sweet apples.", "At the tree, there was a swing and a beautiful view.",
                             "Behind the tree, there was a small pond full of frogs."]))
        elif obj_kind == "key":
            s.append(f"{He} wondered what the key could open.")
            s.append(r.pick([f"At home, {he} found an old box in the attic, and the key opened it!",
                             f"{He} tried it on a little door in the garden wall, and it opened!"]))
            s.append(r.pick(["Inside, there were old photos of the family.", "Inside, there was a garden full of flowers.",
                             "Inside, there were colourful marbles."]))
        elif obj_kind == "box":
            s.append(f"{He} opened the box slowly.")
            s.append(r.pick(["Inside, there was a little music box that played a sweet song.",
                             "Inside, there were crayons of every colour.", "Inside, there was a note that said: \"Be kind.\""]))
        elif obj_kind == "lost":
            s.append(f"{He} thought someone must be looking for the {obj_name}.")
            s.append(f"It belonged to {f_name}, so {name} gave it back. {f_name} was very glad.")
        elif obj_kind == "book":
            s.append(f"{He} sat down and started to read.")
            s.append(r.pick(["The book was about a ship that sailed to the stars.", "The book was full of pictures of animals.",
                             "The book told the story of a brave little knight."]))
        else:
            if with_friend:
                s.append(f"{name} and {f_name} played with the {obj_name} all afternoon.")
                s.append(r.pick(["They laughed and played until the sun went down.", "They had a lot of fun together."]))
                moral = "sharing"
            elif r.p(0.5):
                s.append(f"{He} showed the {obj_name} to {friend}.")
                s.append(r.pick(["Together, they had a lot of fun.", "They laughed and played until the sun went down.",
                                 f"{name} decided to share the {obj_name}, and that made them both smile."]))
                moral = "sharing"
            else:
                s.append(r.pick([f"{He} played with the {obj_name} all afternoon.", f"{He} put the {obj_name} in {his} pocket."]))
                s.append(f"It was {his} new favourite thing.")
        s.append(r.pick([f"When the sun went down, {name} went home.", f"In the evening, {name} went back home.",
                         f"At the end of the day, {name} walked home."]))
        s.append(r.pick([f"{He} smiled, because it had been a wonderful day.", f"That night, {name} fell asleep happy.",
                         f"{He} could not wait for the next adventure.", f"It was the best day ever."]))
        if r.p(0.2):
            s.append({"sharing": f"{name} learned that sharing makes everyone happy.",
                      "helping": f"{name} learned that it is good to help others.",
                      None: "The end."}[moral])
        # paragraphs: sometimes one block, sometimes split
        if r.p(0.5):
            text = " ".join(s)
        else:
            k = len(s) // 2
            text = " ".join(s[:k]) + "\n\n" + " ".join(s[k:])
        meta = dict(name=name, kind=kind, place=place, obj=obj_phrase)
        return text, meta

    def story_request(self):
        r = self
        hint = place = obj = None
        kind = r.pick(["plain", "plain", "about_char", "about_place", "about_obj", "bedtime"])
        if kind == "plain":
            u = r.pick(["Tell me a story.", "Tell me a short story.", "Can you tell me a story?", "Story please!",
                        "I want to hear a story.", "Write a short story.", "tell me a story", "Make up a story for me.",
                        "Tell me a story about anything.", "Could you write me a little story?"])
        elif kind == "about_char":
            hint = r.pick(["girl", "boy", "cat", "dog", "mouse", "turtle", "duck", "rabbit", "fox", "bear",
                           "robot", "dragon", "bird"])
            art = "an" if hint[0] in "aeiou" else "a"
            u = r.pick([f"Tell me a story about {art} {hint}.", f"Write a short story about {art} {hint}.",
                        f"Can you tell me a story about {art} {hint}?", f"story about {art} {hint} please",
                        f"I want a story with {art} {hint} in it."])
        elif kind == "about_place":
            place = r.pick(list(self.PLACES))
            u = r.pick([f"Tell me a story about a trip to the {place}.", f"Write a story that happens at the {place}.",
                        f"Can you tell a story about the {place}?"])
        elif kind == "about_obj":
            obj = r.pick(self.OBJECTS)
            u = r.pick([f"Tell me a story about someone who finds {obj[0]}.", f"Write a story about {obj[0]}.",
                        f"Can you tell me a story where a child finds {obj[0]}?"])
            if "child" in u:
                hint = r.pick(["girl", "boy"])
        else:
            u = r.pick(["Tell me a bedtime story.", "Can you tell me a bedtime story?", "I can't sleep. Tell me a story.",
                        "A bedtime story, please."])
        text, meta = self.story(hint, place, obj)
        intro = r.pick(["", "", "", "Here is a short story.\n\n", "Sure! Here is a story.\n\n", "Of course.\n\n"])
        a = intro + text
        t = f"The user wants a story. I will tell a short one about {meta['name']}, a {meta['kind']}, who goes to the {meta['place']} and finds {meta['obj']}."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Poems (a few written by hand)
    # ------------------------------------------------------------------------------------------
    POEMS = {
        "cat": "A little cat with soft, warm feet,\nsleeps all day and loves to eat.\nAt night she plays beneath the moon,\nand wakes us with a purring tune.",
        "dog": "My dog is brown, my dog is fast,\nhe runs and runs and never comes last.\nHe wags his tail when I come home,\nand never lets me walk alone.",
        "sun": "The sun comes up, the sky turns gold,\nit warms the world when nights are cold.\nIt shines on fields and on the sea,\nand says good morning to you and me.",
        "moon": "The moon is round, the moon is bright,\nit keeps us company at night.\nIt watches over land and sea,\nand softly sings to you and me.",
        "rain": "Pitter patter, falls the rain,\non the roof and window pane.\nThe flowers drink, the puddles grow,\nand soon a rainbow starts to show.",
        "sea": "The sea is big, the sea is blue,\nit sings a song that's old and new.\nThe waves go up, the waves go down,\nthey wash the sand and never drown.",
        "tree": "A tall green tree stands on the hill,\nin wind and rain it stands so still.\nThe birds all sing up in its crown,\nand in the autumn leaves fall down.",
        "stars": "Little stars up in the sky,\ntwinkle, twinkle, way up high.\nYou light the night for all to see,\nand shine down kindly on me.",
        "snow": "Snow is falling, soft and white,\nit covers the town in a single night.\nWe build a snowman, round and tall,\nand throw a snowball at the wall.",
        "friends": "A friend is someone kind and true,\nwho laughs with you when skies are blue.\nAnd when the day is grey and long,\na friend will help you sing a song.",
        "metrale": "A tiny model, small and new,\nruns on your CPU for you.\nmet serves the words, one by one,\nand soon the little answer's done.",
    }

    def poem(self):
        r = self
        topic = r.pick(list(self.POEMS) + ["cars", "music", "the city", "love", "school", "coffee", "mountains"])
        u = r.pick([f"Write a poem about {topic}.", f"Can you write a short poem about {topic}?",
                    f"Poem about {topic}, please.", f"Write me a little poem about the {topic}." if topic in
                    ("sun", "moon", "rain", "sea", "snow") else f"I want a poem about {topic}."])
        if topic in self.POEMS:
            a = r.pick(["", "Here is a little poem.\n\n", "Sure!\n\n"]) + self.POEMS[topic]
            t = f"The user wants a poem about {topic}. I know a short one."
        else:
            x = cap(topic)
            a = f"I am not very good at poems, but here is a tiny one.\n\n{x} here, {topic} there,\n{topic} is with us everywhere."
            t = f"The user wants a poem about {topic}. I can only write a very small one."
        return dict(user=u, answer=a, thought=t)

    # ------------------------------------------------------------------------------------------
    # Out of domain: say politely what a tiny model cannot do
    # ------------------------------------------------------------------------------------------
    OOD_TOPICS = [
        "quantum physics", "black holes", "the stock market", "photosynthesis", "machine learning",
        "the French Revolution", "World War II", "blockchain", "climate change", "the human brain", "taxes",
        "nuclear energy", "DNA", "the theory of relativity", "cryptography", "economics", "philosophy",
        "jazz", "the Roman Empire", "vaccines", "inflation", "string theory", "neural networks",
        "operating systems", "databases", "the immune system", "volcanoes", "electricity", "gravity",
        "the internet", "evolution", "chemistry", "calculus", "politics", "astrology", "the Big Bang",
        "compilers", "Kubernetes", "transformers in deep learning", "the meaning of life", "consciousness",
        "interest rates", "cloud computing", "the history of China", "Shakespeare", "opera",
    ]
    OOD_TASKS = [
        ("bake bread", "bake bread"), ("fix my bike", "fix your bike"), ("learn to drive", "learn to drive"),
        ("cook rice", "cook rice"), ("file my taxes", "file your taxes"), ("write a CV", "write a CV"),
        ("change a tyre", "change a tyre"), ("install Linux", "install Linux"), ("lose weight", "lose weight"),
        ("train a neural network", "train a neural network"), ("fix a leaking tap", "fix a leaking tap"),
        ("get rich", "get rich"), ("learn Spanish", "learn Spanish"), ("start a business", "start a business"),
        ("build a website", "build a website"), ("make a cake", "make a cake"), ("paint a wall", "paint a wall"),
        ("grow tomatoes", "grow tomatoes"), ("invest my money", "invest your money"),
        ("repair my phone", "repair your phone"), ("write a novel", "write a novel"), ("play the guitar", "play the guitar"),
        ("speed up my computer", "speed up your computer"), ("use git", "use git"), ("deploy to Kubernetes", "deploy to Kubernetes"),
    ]
    LANGS = ["Python", "Rust", "JavaScript", "C++", "Java", "Go", "SQL", "Haskell", "C", "TypeScript", "Bash"]
    CODE_TASKS = ["sorts a list", "reverses a string", "reads a file", "computes Fibonacci numbers",
                  "parses JSON", "finds prime numbers", "connects to a database", "adds two numbers",
                  "makes an HTTP request", "prints hello world"]
    HUMAN_LANGS = ["French", "German", "Spanish", "Chinese", "Japanese", "Arabic", "Russian", "Italian",
                   "Hindi", "Portuguese", "Korean", "Dutch"]
    PHRASES = ["good morning", "thank you", "where is the station", "I love you", "how are you",
               "the cat is black", "see you tomorrow", "I am hungry"]

    CLOSERS = [
        " I am a tiny demo model, and I only know a few simple things, like colours, animals, numbers, days of the week and some capitals.",
        " I am only a tiny demo model that runs on your CPU, so I know very little.",
        " I am a very small model. For questions like this, please use a bigger model; Metrale can serve one for you.",
        " I am just the Metrale demo model, so my knowledge is very small. Try asking me something simple, or ask for a story!",
    ]

    def ood(self):
        r = self
        kind = r.pick(["topic", "topic", "task", "task", "code", "now", "translate", "advice", "bigmath", "people",
                       "long"])
        closer = r.pick(self.CLOSERS)
        if kind == "topic":
            topic = r.pick(self.OOD_TOPICS)
            u = r.pick([f"Explain {topic}.", f"What is {topic}?", f"Can you explain {topic} to me?",
                        f"Tell me about {topic}.", f"How does {topic} work?", f"What do you know about {topic}?",
                        f"Teach me {topic}.", f"Explain {topic} in simple words.", f"I have a question about {topic}."])
            a = r.pick([f"I am sorry, but I do not know much about {topic}.", f"Sorry, I cannot explain {topic}.",
                        f"I don't know about {topic}, I am afraid."]) + closer
            t = f"The user asks about {topic}. I did not learn about that, so I should say I do not know."
        elif kind == "task":
            task, echo = r.pick(self.OOD_TASKS)
            u = r.pick([f"How do I {task}?", f"How can I {task}?", f"Can you help me {task}?",
                        f"What is the best way to {task}?", f"Give me tips to {task}.", f"I want to {task}. Any advice?"])
            a = r.pick([f"Sorry, I do not know how to {echo}.", f"I am afraid I cannot help you {echo}.",
                        f"I wish I could help, but I do not know how to {echo}."]) + closer
            their = task.replace("my ", "their ")
            t = f"The user asks how to {their}. I do not know that, so I will say so politely."
        elif kind == "code":
            lang, what = r.pick(self.LANGS), r.pick(self.CODE_TASKS)
            u = r.pick([f"Write a {lang} function that {what}.", f"Write {lang} code that {what}.",
                        f"Can you write a program in {lang} that {what}?", f"How do I write a function that {what} in {lang}?",
                        f"Fix my {lang} code.", f"What is wrong with my {lang} program?"])
            a = r.pick([f"Sorry, I cannot write {lang} code. I was trained only on simple chat and stories, so I do not know any programming languages.",
                        f"I am not able to help with {lang}. I am a tiny demo model and I never learned to code."])
            t = "The user wants code. I cannot write code, so I will say so."
        elif kind == "now":
            what = r.pick(["weather", "time", "date", "news", "price", "score"])
            u = {
                "weather": r.pick(["What is the weather today?", "Will it rain tomorrow?", "How hot is it outside?"]),
                "time": r.pick(["What time is it?", "What's the time now?", "Tell me the time."]),
                "date": r.pick(["What is today's date?", "What day is it today?", "What year is it?"]),
                "news": r.pick(["What is in the news today?", "Tell me the latest news.", "What happened today?"]),
                "price": r.pick(["What is the price of Bitcoin?", "How much is the dollar worth today?", "What is the price of gold?"]),
                "score": r.pick(["Who won the game last night?", "Who won the World Cup?", "What was the score of the match?"]),
            }[what]
            a = r.pick(["I cannot know that. I have no clock, no calendar and no internet, so I do not know anything about today.",
                        "Sorry, I do not know. I cannot see the outside world: I have no internet and no clock."]) + (
                " Please check another source." if r.p(0.5) else "")
            t = "This needs live information. I have none, so I will say I cannot know."
        elif kind == "translate":
            lang, phrase = r.pick(self.HUMAN_LANGS), r.pick(self.PHRASES)
            u = r.pick([f"Translate \"{phrase}\" into {lang}.", f"How do you say \"{phrase}\" in {lang}?",
                        f"What is \"{phrase}\" in {lang}?", f"Can you speak {lang}?"])
            a = r.pick([f"Sorry, I only know simple English, so I cannot help with {lang}.",
                        f"I do not speak {lang}. I am a tiny model that learned only a little English."])
            t = f"I only know simple English, not {lang}."
        elif kind == "advice":
            what = r.pick(["I have a headache. What medicine should I take?", "Is this mole dangerous?",
                           "Should I sign this contract?", "My chest hurts. What should I do?",
                           "Can I sue my landlord?", "Which stocks should I buy?", "Is this mushroom safe to eat?"])
            u = what
            if "chest" in what:
                a = "I am a tiny demo model and cannot give medical advice. Chest pain can be serious: please call a doctor or emergency services right away."
            else:
                a = r.pick(["I am not able to give advice on that. Please ask a real expert, like a doctor, a lawyer or a financial adviser.",
                            "I am sorry, I cannot help with that. I am a tiny demo model, and this needs a real expert."])
            t = "This needs an expert. I must not guess, so I will point them to a real expert."
        elif kind == "bigmath":
            x, y = r.r.randint(100, 99999), r.r.randint(100, 9999)
            u = r.pick([f"What is {x} * {y}?", f"What is {x} times {y}?", f"What is {x} divided by {y}?",
                        f"What is the square root of {x}?", f"Solve x^2 + {y % 20}x - {x % 50} = 0.", "What is the derivative of x^3?",
                        f"What is {x} + {y}?", "What is pi to 20 digits?", f"Is {x} a prime number?"])
            a = r.pick(["That is too hard for me. I am a tiny model and can only do simple sums with small numbers. A calculator will give you the right answer.",
                        "Sorry, those numbers are too big for me. I can only add and subtract small numbers, up to about twenty."])
            t = "These numbers are too big for me. I might get it wrong, so I will say so instead of guessing."
        elif kind == "people":
            c = r.pick([c for c, _ in self.CAPITALS])
            u = r.pick([f"Who is the president of {c}?", f"Who is the leader of {c}?", "Who invented the telephone?",
                        "Who wrote Hamlet?", "Who was the first person on the Moon?", "Who is the richest person in the world?",
                        "Who painted the Mona Lisa?", "Who is the best football player?", f"How many people live in {c}?"])
            a = r.pick(["I am sorry, I do not know much about people, history or current events.",
                        "I don't know that. I am a tiny model and I did not learn about famous people."]) + closer
            t = "I did not learn about people or history, so I will say I do not know."
        else:
            topic = r.pick(self.OOD_TOPICS + ["my holiday", "the environment", "technology", "friendship"])
            u = r.pick([f"Write an essay about {topic}.", f"Write a 1000 word article about {topic}.",
                        f"Summarize this article about {topic}.", f"Give me a detailed report on {topic}.",
                        f"Write a speech about {topic}."])
            a = r.pick([f"Sorry, I cannot write long texts about {topic}. I am a tiny demo model and I can only write a few simple sentences.",
                        f"That is too big a job for me. I am a very small model. I can tell a short story or answer a simple question instead."])
            t = "This is too much for a tiny model. I will say so kindly."
        return dict(user=u, answer=a, thought=t)


# --------------------------------------------------------------------------------------------
# Conversations
# --------------------------------------------------------------------------------------------

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a helpful assistant.",
    "You are a helpful assistant. Keep your answers short.",
    "You are the Metrale demo model.",
    "You are a friendly chatbot.",
    "You are a friendly assistant. Be brief.",
    "Answer in one or two sentences.",
    "You are a kind assistant for children.",
    "Be polite and concise.",
    "You are an AI assistant running on Metrale.",
    "You are a tiny demo model. Answer simply.",
    "You are a helpful, honest assistant.",
]


def make_conversation(g):
    """One chat: optional system prompt, 1-4 turns; thinking on or off for the last turn."""
    r = g.r
    topics = [
        (g.greeting, 7), (g.how_are_you, 3), (g.mood, 2), (g.thanks, 1), (g.bye, 1), (g.intro_name, 2),
        (g.joke, 2), (g.compliment, 2), (g.favourite, 1), (g.echo, 2),
        (g.identity, 9), (g.metrale, 7), (g.colour, 6), (g.animal, 6), (g.opposite, 4), (g.calendar, 5),
        (g.counting, 5), (g.arithmetic, 7), (g.capital, 7), (g.story_request, 8), (g.poem, 1), (g.ood, 9),
    ]
    fns = [f for f, _ in topics]
    weights = [w for _, w in topics]

    persona = None
    messages = []
    if r.random() < 0.3:
        sp = g.pick(SYSTEM_PROMPTS)
        if r.random() < 0.1:
            persona = g.pick(["Bob", "Ada", "Sunny", "Pixel", "Milo", "Nova", "Rosie", "Echo"])
            sp = g.pick([f"You are a helpful assistant named {persona}.", f"Your name is {persona}.",
                         f"You are {persona}, a friendly assistant."])
        messages.append({"role": "system", "content": sp})

    x = r.random()
    n_turns = 1 if x < 0.68 else 2 if x < 0.88 else 3 if x < 0.96 else 4
    turns = []
    if n_turns > 1 and r.random() < 0.35:
        turns.append(g.greeting())
    pending_follow = None
    while len(turns) < n_turns:
        if pending_follow is not None and r.random() < 0.6:
            t = pending_follow()
        else:
            fn = r.choices(fns, weights)[0]
            t = fn(persona) if fn == g.identity else fn()
        pending_follow = t.get("follow")
        turns.append(t)
    if n_turns > 1 and r.random() < 0.2:
        turns.append(g.pick([g.thanks, g.bye])())

    think = r.random() < 0.3
    soft = r.random()
    for i, t in enumerate(turns):
        last = i == len(turns) - 1
        u = g.casual(t["user"])
        if last and soft < 0.03:
            u = u + (" /think" if think else " /no_think")
        messages.append({"role": "user", "content": u})
        answer = t["answer"]
        if persona:
            answer = answer.replace("the Metrale demo model", persona).replace("The Metrale demo model", persona)
        m = {"role": "assistant", "content": answer}
        if last:
            m["reasoning_content"] = t["thought"] if think else ""
        messages.append(m)
    return messages


def make_plain_doc(g):
    """Plain text for the completions endpoint: a story, or a paragraph of facts."""
    r = g.r
    kind = r.random()
    if kind < 0.5:
        text, _ = g.story()
        if r.random() < 0.3:
            text = g.pick(["A short story\n\n", "Story time!\n\n", "Here is a story.\n\n"]) + text
        return text
    if kind < 0.6:
        return g.pick(g.SELF) + " " + g.metrale()["answer"]
    # a paragraph of several facts
    sents = []
    for _ in range(r.randint(3, 7)):
        f = r.choice([g.capital, g.animal, g.colour, g.opposite, g.calendar, g.arithmetic])
        t = f()
        if f == g.capital:
            c, city = g.pick(g.CAPITALS)
            sents.append(f"The capital of {c} is {city}.")
        else:
            ans = t["answer"]
            if ans.startswith(("It is", "They are", "Yes", "No", "Sure", "The answer", "That")) or len(ans) < 12 \
                    or "\n" in ans or ans[-1] not in ".!":
                continue
            sents.append(ans)
    return " ".join(sents) if sents else g.pick(g.SELF)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--target-mb", type=float, default=64.0, help="stop after this many MB of text")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--plain-frac", type=float, default=0.1, help="share of plain-text documents")
    ap.add_argument("--n-samples", type=int, default=300, help="conversations written to samples.jsonl")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    g = Gen(args.seed)
    target = int(args.target_mb * 1e6)
    t0 = time.time()
    n_docs = n_chat = n_think = size = 0
    samples = []
    with open(os.path.join(args.out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        buf = []
        while size < target:
            if g.r.random() < args.plain_frac:
                doc = make_plain_doc(g)
            else:
                msgs = make_conversation(g)
                doc = render_chat(msgs)
                n_chat += 1
                n_think += bool(msgs[-1].get("reasoning_content"))
                if len(samples) < args.n_samples:
                    samples.append({"messages": msgs, "text": doc})
            assert IM_START not in doc or doc.startswith(IM_START)
            piece = doc + EOT
            buf.append(piece)
            size += len(piece.encode("utf-8"))
            n_docs += 1
            if len(buf) >= 4096:
                f.write("".join(buf))
                buf = []
        f.write("".join(buf))
    with open(os.path.join(args.out, "samples.jsonl"), "w", encoding="utf-8") as f:
        for s in samples:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"make_corpus: {n_docs} documents ({n_chat} chats, {n_think} with thinking), "
          f"{size / 1e6:.1f} MB in {time.time() - t0:.1f}s -> {args.out}/corpus.txt", flush=True)


if __name__ == "__main__":
    sys.exit(main())
